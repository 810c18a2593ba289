//! Optional persistence of a broker's data in a directory: an append-only commit log of the
//! stored records plus a small JSON file with topics, committed offsets and scheduler
//! progress. Enough for a restarted standalone broker to keep its messages and offsets.

use crate::broker::offsets::OffsetTable;
use crate::broker::record::decode_stored;
use crate::broker::schedule::{ScheduleProgress, SCHEDULE_TOPIC};
use crate::broker::store::TopicConfig;
use crate::broker::BrokerCore;
use crate::message::property;
use crate::protocol::body::SubscriptionGroupConfig;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

const COMMIT_LOG: &str = "commitlog";
const META: &str = "meta.json";

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Meta {
    topics: Vec<TopicConfig>,
    offsets: OffsetTable,
    schedule: ScheduleProgress,
    /// Absent in the data of versions before subscription groups were kept.
    #[serde(default)]
    groups: Vec<SubscriptionGroupConfig>,
}

/// One broker's data directory.
pub struct DataDir {
    root: PathBuf,
    log: File,
    persisted: i64,
    last_meta: String,
}

impl DataDir {
    /// Opens (creating) `root`.
    pub fn open(root: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join(COMMIT_LOG))?;
        Ok(DataDir {
            root: root.to_owned(),
            log,
            persisted: 0,
            last_meta: String::new(),
        })
    }

    /// Loads what the directory holds into a fresh core.
    pub fn load(&mut self, core: &mut BrokerCore) -> io::Result<()> {
        let meta: Meta = match std::fs::read(self.root.join(META)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Meta::default(),
            Err(e) => return Err(e),
        };
        for topic in meta.topics {
            core.store_mut().upsert_topic(topic);
        }
        let delays = core.config().delay_levels.clone();
        let mut reader = BufReader::new(File::open(self.root.join(COMMIT_LOG))?);
        let mut size_bytes = [0u8; 4];
        // Bytes of whole records read so far: what stays of the log if its end is torn.
        let mut good: u64 = 0;
        let mut torn = false;
        loop {
            match reader.read_exact(&mut size_bytes) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
            let size = i32::from_be_bytes(size_bytes);
            let Ok(size) = usize::try_from(size) else {
                torn = true;
                break;
            };
            if size < 4 {
                torn = true;
                break;
            }
            let mut raw = vec![0u8; size];
            raw[..4].copy_from_slice(&size_bytes);
            if reader.read_exact(&mut raw[4..]).is_err() {
                // A torn last record from a crash: ignore it.
                torn = true;
                break;
            }
            let Ok(rec) = decode_stored(&raw) else {
                torn = true;
                break;
            };
            let props = &rec.message.properties;
            let tags_code = if rec.message.topic == SCHEDULE_TOPIC {
                let level = props
                    .get(property::DELAY)
                    .and_then(|d| d.parse::<i32>().ok())
                    .unwrap_or(1)
                    .min(delays.max_level());
                rec.store_timestamp + delays.delay_ms(level).unwrap_or(0)
            } else {
                i64::from(crate::filter::tags_code(props.get(property::TAGS)))
            };
            if !core
                .store_mut()
                .replay(&raw, tags_code)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            {
                torn = true;
                break;
            }
            good += size as u64;
        }
        if torn || self.log.metadata()?.len() > good {
            // Cut the torn end off, or records appended after it would be lost at the next
            // start (reading stops at the first bad record).
            tracing::warn!(dir = %self.root.display(), kept = good, "commit log ends in a torn record; truncating it");
            self.log.set_len(good)?;
        }
        self.persisted = core.store().commit_log_max_offset();
        core.set_group_configs(meta.groups);
        core.set_offsets(meta.offsets);
        core.set_schedule_progress(meta.schedule);
        Ok(())
    }

    /// Appends new records and rewrites the metadata when it changed.
    pub fn save(&mut self, core: &BrokerCore) -> io::Result<()> {
        let mut appended = false;
        for raw in core.store().records_from(self.persisted) {
            self.log.write_all(raw)?;
            self.persisted += raw.len() as i64;
            appended = true;
        }
        if appended {
            self.log.flush()?;
        }
        let meta = Meta {
            topics: core.topic_configs(),
            offsets: core.offsets().clone(),
            schedule: core.schedule_progress().clone(),
            groups: core.group_configs(),
        };
        let text = serde_json::to_string(&meta)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if text != self.last_meta {
            let tmp = self.root.join("meta.json.tmp");
            std::fs::write(&tmp, &text)?;
            std::fs::rename(&tmp, self.root.join(META))?;
            self.last_meta = text;
        }
        Ok(())
    }
}
