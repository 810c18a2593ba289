//! Message ids: the broker's offset id and the producer's unique id (`UNIQ_KEY`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::ProtocolError;

const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// Appends the uppercase hex of `bytes` (Java `UtilAll.bytes2string`).
fn push_hex(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(char::from(HEX_DIGITS[usize::from(b >> 4)]));
        out.push(char::from(HEX_DIGITS[usize::from(b & 0x0F)]));
    }
}

/// Decodes hex (either case) into bytes; `None` on odd length or a non-hex character.
fn parse_hex(text: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some(nibble(*hi)? << 4 | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

/// The broker's id of a stored message: uppercase hex of store IP ‖ port (i32) ‖ commit-log
/// offset (i64) — 32 characters for IPv4, 56 for IPv6.
///
/// ```
/// use rocketmq_actor::message::offset_msg_id;
/// let id = offset_msg_id("127.0.0.1:10911".parse().unwrap(), 0);
/// assert_eq!(id, "7F00000100002A9F0000000000000000");
/// ```
pub fn offset_msg_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut out = String::with_capacity(56);
    match store_host.ip() {
        IpAddr::V4(ip) => push_hex(&mut out, &ip.octets()),
        IpAddr::V6(ip) => push_hex(&mut out, &ip.octets()),
    }
    push_hex(&mut out, &i32::from(store_host.port()).to_be_bytes());
    push_hex(&mut out, &commit_log_offset.to_be_bytes());
    out
}

/// A decoded offset id: where the message is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OffsetMsgId {
    /// The broker's store address.
    pub store_host: SocketAddr,
    /// Physical offset in the commit log.
    pub commit_log_offset: i64,
}

/// Reverses [`offset_msg_id`] (Java `MessageDecoder.decodeMessageId`): 32 hex characters are
/// an IPv4 id, 56 an IPv6 one; anything else is an error.
///
/// ```
/// use rocketmq_actor::message::decode_offset_msg_id;
/// let id = decode_offset_msg_id("7F00000100002A9F0000000000000010").unwrap();
/// assert_eq!(id.store_host, "127.0.0.1:10911".parse().unwrap());
/// assert_eq!(id.commit_log_offset, 16);
/// ```
pub fn decode_offset_msg_id(id: &str) -> Result<OffsetMsgId, ProtocolError> {
    let invalid = || ProtocolError::InvalidField {
        field: "msgId",
        value: id.to_owned(),
    };
    let ip_len = match id.len() {
        32 => 4,
        56 => 16,
        _ => return Err(invalid()),
    };
    let bytes = parse_hex(id).ok_or_else(invalid)?;
    let (ip_bytes, rest) = bytes.split_at_checked(ip_len).ok_or_else(invalid)?;
    let (port_bytes, offset_bytes) = rest.split_at_checked(4).ok_or_else(invalid)?;
    let ip = match ip_len {
        4 => IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(ip_bytes).map_err(|_| invalid())?,
        )),
        _ => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(ip_bytes).map_err(|_| invalid())?,
        )),
    };
    let port = i32::from_be_bytes(port_bytes.try_into().map_err(|_| invalid())?);
    let port = u16::try_from(port).map_err(|_| invalid())?;
    let commit_log_offset = i64::from_be_bytes(offset_bytes.try_into().map_err(|_| invalid())?);
    Ok(OffsetMsgId {
        store_host: SocketAddr::new(ip, port),
        commit_log_offset,
    })
}

/// Generates `UNIQ_KEY` values in the Java producer's format (`MessageClientIDSetter`):
/// uppercase hex of IP (4 or 16 bytes) ‖ pid (i16) ‖ class-loader hash (i32) ‖ milliseconds
/// since the start of the current month (i32) ‖ counter (i16).
///
/// Ids are unique within the generator as long as fewer than 65 536 are made in the same
/// millisecond. The month boundary is computed in UTC (Java uses the local time zone; the
/// value is opaque to everyone, only uniqueness matters).
///
/// ```
/// use rocketmq_actor::message::UniqueIdGenerator;
/// let ids = UniqueIdGenerator::new("10.0.0.1".parse().unwrap(), 4242, 7);
/// let a = ids.next_id(1_700_000_000_000);
/// let b = ids.next_id(1_700_000_000_000);
/// assert_eq!(a.len(), 32);
/// assert!(a.starts_with("0A000001109200000007"));
/// assert_ne!(a, b);
/// ```
#[derive(Debug)]
pub struct UniqueIdGenerator {
    prefix: String,
    counter: AtomicU32,
    /// The UTC month of the last id: its first day since the epoch (high half) and its
    /// length in days (low half; 0 before the first id), so the calendar is worked out
    /// once a month rather than per id (Java's producer keeps the same two bounds).
    month: AtomicU64,
}

/// Milliseconds in a day.
const MS_PER_DAY: i64 = 86_400_000;

impl UniqueIdGenerator {
    /// A generator for a producer on `ip` in process `pid`; `instance_hash` stands for Java's
    /// class-loader hash and distinguishes generators within one process.
    pub fn new(ip: IpAddr, pid: u32, instance_hash: i32) -> Self {
        let mut prefix = String::with_capacity(44);
        match ip {
            IpAddr::V4(ip) => push_hex(&mut prefix, &ip.octets()),
            IpAddr::V6(ip) => push_hex(&mut prefix, &ip.octets()),
        }
        // Java keeps the low 16 bits of the pid (`(short) pid`).
        push_hex(&mut prefix, &(pid as u16).to_be_bytes());
        push_hex(&mut prefix, &instance_hash.to_be_bytes());
        UniqueIdGenerator {
            prefix,
            counter: AtomicU32::new(0),
            month: AtomicU64::new(0),
        }
    }

    /// A generator for this process: its pid, and an instance hash taken from the system
    /// clock's nanoseconds so two generators made in one process differ.
    pub fn from_system(ip: IpAddr) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
            .unwrap_or(0);
        UniqueIdGenerator::new(ip, std::process::id(), nanos as i32)
    }

    /// The next id, for a message created at `now_ms` (ms since the epoch).
    pub fn next_id(&self, now_ms: i64) -> String {
        let since_month = now_ms.saturating_sub(self.month_start_ms(now_ms));
        let counter = self.counter.fetch_add(1, Ordering::Relaxed) as u16;
        let mut id = String::with_capacity(self.prefix.len() + 12);
        id.push_str(&self.prefix);
        push_hex(&mut id, &(since_month as i32).to_be_bytes());
        push_hex(&mut id, &counter.to_be_bytes());
        id
    }

    /// The first instant (ms since the epoch) of the UTC month containing `now_ms`, from the
    /// remembered month when it is the same.
    fn month_start_ms(&self, now_ms: i64) -> i64 {
        let day = now_ms.div_euclid(MS_PER_DAY);
        let month = self.month.load(Ordering::Relaxed);
        let first = i64::from((month >> 32) as u32 as i32);
        let length = i64::from(month as u32);
        if day >= first && day < first + length {
            return first.saturating_mul(MS_PER_DAY);
        }
        let (first, next) = utc_month(day);
        if let (Ok(first), Ok(length)) = (i32::try_from(first), u32::try_from(next - first)) {
            let packed = (u64::from(first as u32) << 32) | u64::from(length);
            self.month.store(packed, Ordering::Relaxed);
        }
        first.saturating_mul(MS_PER_DAY)
    }
}

/// The UTC month containing `day` (days since the epoch): its first day and the first day of
/// the next. Days outside the calendar `time` knows (years 1–9999) count as a one-day month.
fn utc_month(day: i64) -> (i64, i64) {
    let epoch = time::Date::from_calendar_date(1970, time::Month::January, 1)
        .map(time::Date::to_julian_day)
        .unwrap_or(2_440_588);
    let date = i32::try_from(day)
        .ok()
        .and_then(|day| day.checked_add(epoch))
        .and_then(|julian| time::Date::from_julian_day(julian).ok());
    match date {
        Some(date) => {
            let first = day - i64::from(date.day()) + 1;
            (first, first + i64::from(date.month().length(date.year())))
        }
        None => (day, day + 1),
    }
}

/// Milliseconds since the epoch of the first instant of the UTC month containing `ms`.
#[cfg(test)]
fn start_of_month_utc_ms(ms: i64) -> i64 {
    utc_month(ms.div_euclid(MS_PER_DAY))
        .0
        .saturating_mul(MS_PER_DAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remembered_month_gives_the_calendar_month_start_at_every_boundary() {
        let ids = UniqueIdGenerator::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 1, 1);
        // Around month starts (a leap February and a year end among them), forwards and back.
        let boundaries = [
            1_704_067_200_000_i64, // 2024-01-01
            1_706_745_600_000,     // 2024-02-01
            1_709_251_200_000,     // 2024-03-01 (after 29 days)
            1_735_689_600_000,     // 2025-01-01
        ];
        let mut times = Vec::new();
        for b in boundaries {
            times.extend([b - 1, b, b + 1, b - MS_PER_DAY, b + 27 * MS_PER_DAY]);
        }
        times.extend(times.clone().into_iter().rev());
        for t in times {
            assert_eq!(ids.month_start_ms(t), start_of_month_utc_ms(t), "at {t}");
        }
    }
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn offset_id_matches_the_reference_example() {
        // protocol.md §3.8: 127.0.0.1:10911, offset 0.
        let id = offset_msg_id("127.0.0.1:10911".parse().unwrap(), 0);
        assert_eq!(id, "7F00000100002A9F0000000000000000");
        let decoded = decode_offset_msg_id(&id).unwrap();
        assert_eq!(decoded.store_host, "127.0.0.1:10911".parse().unwrap());
        assert_eq!(decoded.commit_log_offset, 0);
    }

    #[test]
    fn ipv6_offset_id_has_56_chars_and_round_trips() {
        let host: SocketAddr = "[::1]:10911".parse().unwrap();
        let id = offset_msg_id(host, 0x0102_0304_0506_0708);
        assert_eq!(id.len(), 56);
        assert_eq!(
            id,
            format!(
                "{}{}{}",
                "0".repeat(31) + "1",
                "00002A9F",
                "0102030405060708"
            )
        );
        let decoded = decode_offset_msg_id(&id.to_lowercase()).unwrap();
        assert_eq!(decoded.store_host, host);
        assert_eq!(decoded.commit_log_offset, 0x0102_0304_0506_0708);
    }

    #[test]
    fn malformed_offset_ids_are_errors() {
        for bad in [
            "",
            "7F00",
            "ZZ00000100002A9F0000000000000000",
            "7F0000010001FFFF0000000000000000",
        ] {
            assert!(decode_offset_msg_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unique_ids_follow_the_java_layout() {
        let ids = UniqueIdGenerator::new("192.168.1.2".parse().unwrap(), 0x1_2345, -1);
        // 2024-03-01T00:00:01.5Z: 1500 ms into the month.
        let march_first = 1_709_251_200_000_i64;
        let id = ids.next_id(march_first + 1_500);
        assert_eq!(
            id,
            "C0A80102".to_owned() + "2345" + "FFFFFFFF" + "000005DC" + "0000"
        );
        let next = ids.next_id(march_first + 1_500);
        assert!(next.ends_with("000005DC0001"));
        let v6 = UniqueIdGenerator::new("::1".parse().unwrap(), 1, 1).next_id(march_first);
        assert_eq!(v6.len(), 56);
    }

    #[test]
    fn month_start_handles_leap_years_and_pre_epoch() {
        // 2024-02-29T12:00Z → 2024-02-01T00:00Z.
        assert_eq!(start_of_month_utc_ms(1_709_208_000_000), 1_706_745_600_000);
        // 1969-12-31T23:59:59Z → 1969-12-01T00:00Z.
        assert_eq!(start_of_month_utc_ms(-1_000), -2_678_400_000);
    }

    #[test]
    fn unique_ids_do_not_repeat() {
        let ids = UniqueIdGenerator::from_system("127.0.0.1".parse().unwrap());
        let seen: HashSet<String> = (0..10_000)
            .map(|_| ids.next_id(1_700_000_000_000))
            .collect();
        assert_eq!(seen.len(), 10_000);
    }

    proptest! {
        #[test]
        fn offset_ids_round_trip(ip in any::<[u8; 4]>(), port in any::<u16>(), offset in any::<i64>()) {
            let host = SocketAddr::from((ip, port));
            let decoded = decode_offset_msg_id(&offset_msg_id(host, offset)).unwrap();
            prop_assert_eq!(decoded, OffsetMsgId { store_host: host, commit_log_offset: offset });
        }

        #[test]
        fn decoding_arbitrary_text_never_panics(text in ".{0,60}") {
            let _ = decode_offset_msg_id(&text);
        }

        #[test]
        fn a_day_lies_in_its_month(day in -700_000i64..2_900_000) {
            let (first, next) = utc_month(day);
            prop_assert!(first <= day && day < next, "{} not in {}..{}", day, first, next);
            prop_assert!((28..=31).contains(&(next - first)), "a month of {} days", next - first);
            // The next month starts where this one ends.
            prop_assert_eq!(utc_month(next).0, next);
        }
    }
}
