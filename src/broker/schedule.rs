//! Delay levels and the scheduled-message bookkeeping (`ScheduleMessageService`).
//!
//! A delayed message is stored in `SCHEDULE_TOPIC_XXXX`, queue `level − 1`, with its real topic
//! and queue kept in the REAL_TOPIC / REAL_QID properties and its deliver time as the
//! consume-queue tags code. Within one level deliver times never decrease, so each level is a
//! FIFO: the scheduler only remembers how far it has delivered.

use std::collections::BTreeMap;
use std::time::Duration;

/// Topic holding scheduled messages.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// The real broker's default `messageDelayLevel`.
pub const DEFAULT_DELAY_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// Delay per level (level 1 is the first entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayLevels {
    levels_ms: Vec<i64>,
}

impl Default for DelayLevels {
    fn default() -> Self {
        DelayLevels::parse(DEFAULT_DELAY_LEVELS).unwrap_or(DelayLevels {
            levels_ms: vec![1_000],
        })
    }
}

impl DelayLevels {
    /// Parses the real broker's syntax: space-separated numbers with unit `s`, `m`, `h` or `d`
    /// (plus `ms` for fast tests).
    ///
    /// ```ignore
    /// use rocketmq_actor::broker::schedule::DelayLevels;
    /// let levels = DelayLevels::parse("1s 2m 10ms").unwrap();
    /// assert_eq!(levels.delay_ms(2), Some(120_000));
    /// assert_eq!(levels.delay_ms(3), Some(10));
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let mut levels_ms = Vec::new();
        for item in text.split_whitespace() {
            let (number, unit_ms) = if let Some(n) = item.strip_suffix("ms") {
                (n, 1)
            } else if let Some(n) = item.strip_suffix('s') {
                (n, 1_000)
            } else if let Some(n) = item.strip_suffix('m') {
                (n, 60_000)
            } else if let Some(n) = item.strip_suffix('h') {
                (n, 3_600_000)
            } else if let Some(n) = item.strip_suffix('d') {
                (n, 86_400_000)
            } else {
                return None;
            };
            let n: i64 = number.parse().ok()?;
            levels_ms.push(n.checked_mul(unit_ms)?);
        }
        (!levels_ms.is_empty()).then_some(DelayLevels { levels_ms })
    }

    /// Explicit delays, level 1 first.
    pub fn from_durations(levels: &[Duration]) -> Self {
        let levels_ms: Vec<i64> = levels
            .iter()
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .collect();
        if levels_ms.is_empty() {
            DelayLevels::default()
        } else {
            DelayLevels { levels_ms }
        }
    }

    /// Every delay multiplied by `scale` (e.g. 0.001 turns seconds into milliseconds).
    pub fn scaled(&self, scale: f64) -> Self {
        DelayLevels {
            levels_ms: self
                .levels_ms
                .iter()
                .map(|&ms| ((ms as f64) * scale).round().max(0.0) as i64)
                .collect(),
        }
    }

    /// Highest level.
    pub fn max_level(&self) -> i32 {
        i32::try_from(self.levels_ms.len()).unwrap_or(i32::MAX)
    }

    /// Delay of a level, `None` outside `1..=max_level`.
    pub fn delay_ms(&self, level: i32) -> Option<i64> {
        let index = usize::try_from(level.checked_sub(1)?).ok()?;
        self.levels_ms.get(index).copied()
    }
}

/// How far each level's queue has been delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleProgress {
    /// level → next schedule-queue offset to deliver.
    pub delivered: BTreeMap<i32, i64>,
}

impl ScheduleProgress {
    /// Next offset to deliver for a level.
    pub fn next_offset(&self, level: i32) -> i64 {
        self.delivered.get(&level).copied().unwrap_or(0)
    }

    /// Records that everything below `offset` was delivered.
    pub fn advance(&mut self, level: i32, offset: i64) {
        self.delivered.insert(level, offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_table_is_the_real_brokers_18_levels() {
        let d = DelayLevels::default();
        assert_eq!(d.max_level(), 18);
        assert_eq!(d.delay_ms(1), Some(1_000));
        assert_eq!(d.delay_ms(3), Some(10_000));
        assert_eq!(d.delay_ms(5), Some(60_000));
        assert_eq!(d.delay_ms(18), Some(7_200_000));
        assert_eq!(d.delay_ms(0), None);
        assert_eq!(d.delay_ms(19), None);
        // Levels 3..=18 are the 16 retries, 4h45m40s in total.
        let total: i64 = (3..=18).filter_map(|l| d.delay_ms(l)).sum();
        assert_eq!(total, 285 * 60_000 + 40_000);
    }

    #[test]
    fn scaling_and_bad_syntax() {
        let d = DelayLevels::default().scaled(0.001);
        assert_eq!(d.delay_ms(1), Some(1));
        assert_eq!(d.delay_ms(18), Some(7_200));
        assert!(DelayLevels::parse("1x").is_none());
        assert!(DelayLevels::parse("").is_none());
    }
}
