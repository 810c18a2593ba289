//! The offset store actor: the consume offsets of one consumer group.
//!
//! Queue actors publish the committed offset of their queue (the smallest unfinished message) in a
//! [`CommittedOffset`] cell they attach here, which the store folds into its table before it reads
//! it (no message per commit); pull consumers send theirs. The store keeps them in an
//! [`OffsetTable`] and persists them — to the brokers with UPDATE_CONSUMER_OFFSET every
//! `persist_consumer_offset_interval` in clustering mode (all queues of one broker sent back to
//! back), or to a local JSON file written atomically with a `.bak` copy in broadcasting mode.
//! Writes of the file run on the blocking pool so the arbiter never blocks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;

use crate::actors::client::Client;
use crate::consumer::offset::{
    self, encode_local_offsets, pick_local_offsets, CommittedOffset, LiveOffsets, OffsetTable,
    StoredOffset,
};
use crate::error::{Error, Result};
use crate::message::MessageQueue;

/// Where offsets live.
#[derive(Debug, Clone)]
pub enum OffsetBackend {
    /// On the brokers (clustering).
    Remote,
    /// In a local file (broadcasting).
    LocalFile(PathBuf),
}

/// Reads the stored offset of a queue (broker query or local file), for a newly owned queue.
#[derive(Message)]
#[rtype(result = "StoredOffset")]
pub struct LoadOffset {
    /// The queue.
    pub queue: MessageQueue,
    /// Ask the broker for "not found" rather than its "0 for a new group" answer
    /// (`setZeroIfNotFound=false`).
    pub exact: bool,
}

/// The in-memory offset of a queue.
#[derive(Message)]
#[rtype(result = "Option<i64>")]
pub struct ReadOffset(pub MessageQueue);

/// From now on `committed` holds the queue's commits (a queue actor's, sent before it reads
/// its start offset); a cell it replaces is folded in first.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AttachCommitted {
    /// The queue.
    pub queue: MessageQueue,
    /// Where its actor publishes its commits.
    pub committed: CommittedOffset,
}

/// Folds `committed` in a last time and lets it go (a dropped queue's actor, before it has
/// the offset persisted); a newer cell of the queue stays.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DetachCommitted {
    /// The queue.
    pub queue: MessageQueue,
    /// The cell its actor published in.
    pub committed: CommittedOffset,
}

/// Sets a queue's offset in memory, up or down (a pull consumer's `update_consume_offset`, a
/// lite consumer's commit); persisted with the next periodic persist.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StoreOffset {
    /// The queue.
    pub queue: MessageQueue,
    /// The offset (next offset to consume).
    pub offset: i64,
}

/// Forces a queue's offset and persists it at once (resets; `freeze` for OFFSET_ILLEGAL).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct SetOffset {
    /// The queue.
    pub queue: MessageQueue,
    /// The offset.
    pub offset: i64,
    /// Ignore later increase-only updates until the queue is removed (OFFSET_ILLEGAL).
    pub freeze: bool,
}

/// Persists one queue's offset now and forgets the queue (it was dropped).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct PersistAndRemove(pub MessageQueue);

/// Persists every offset now and waits for the store to confirm each (commits, shutdown):
/// an error when one could not be written.
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct PersistAll;

/// Holds an offset read from the store (a pull consumer's `fetch_consume_offset`) without
/// marking it for writing back.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CacheOffset {
    /// The queue.
    pub queue: MessageQueue,
    /// The stored offset.
    pub offset: i64,
}

/// A group member's current division: the topics it divides and the queues it owns of them.
/// From then on, periodic persists write only owned queues of those topics (and changed ones
/// of other topics), never an offset of a queue another member owns.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetOwnership {
    /// The topics whose queues the group divides.
    pub topics: BTreeSet<String>,
    /// The queues this member owns.
    pub owned: BTreeSet<MessageQueue>,
}

/// A copy of every in-memory offset.
#[derive(Message)]
#[rtype(result = "BTreeMap<MessageQueue, i64>")]
pub struct Snapshot;

/// The offset store of one consumer group.
pub struct OffsetStore {
    client: Client,
    group: String,
    backend: OffsetBackend,
    table: OffsetTable,
    /// The queue actors' commits, folded into `table` before it is read.
    live: LiveOffsets,
    persist_interval: Duration,
    /// Local mode: the offsets the file holds (read at start, then as last written).
    loaded: BTreeMap<MessageQueue, i64>,
    /// A group member's division, when the store belongs to one.
    ownership: Option<SetOwnership>,
    /// Stopped on purpose (see `StopActor`): a restart arms no timer.
    pub(crate) retired: bool,
}

impl OffsetStore {
    /// A store for `group`. A local file is read now: a corrupt file without a usable backup is
    /// an error rather than a silent restart from `consume_from_where`.
    pub fn new(
        client: Client,
        group: impl Into<String>,
        backend: OffsetBackend,
        persist_interval: Duration,
    ) -> Result<Self> {
        let loaded = match &backend {
            OffsetBackend::Remote => BTreeMap::new(),
            OffsetBackend::LocalFile(path) => {
                let files = offset::fs::read_with_backup(path)?;
                let (source, table) =
                    pick_local_offsets(files.main.as_deref(), files.backup.as_deref())?;
                tracing::info!(path = %path.display(), ?source, queues = table.len(), "local offsets loaded");
                table
            }
        };
        Ok(OffsetStore {
            client,
            group: group.into(),
            backend,
            table: OffsetTable::from_offsets(loaded.clone()),
            live: LiveOffsets::default(),
            persist_interval,
            loaded,
            ownership: None,
            retired: false,
        })
    }

    /// Persists `only` that queue, or every queue: confirmed when `sync`, else one-way (the
    /// periodic persist, which for a group member skips queues it does not own).
    fn persist_future(
        &mut self,
        only: Option<&MessageQueue>,
        sync: bool,
    ) -> impl ActorFuture<Self, Output = Result<()>> {
        match only {
            Some(queue) => self.live.fold(&mut self.table, queue),
            None => self.live.fold_all(&mut self.table),
        }
        let entries: Vec<(MessageQueue, i64)> = match (only, &self.ownership) {
            (Some(queue), _) => self
                .table
                .read(queue)
                .map(|offset| vec![(queue.clone(), offset)])
                .unwrap_or_default(),
            (None, Some(ownership)) if !sync => self
                .table
                .member_persist_entries(&ownership.topics, &ownership.owned),
            (None, _) => self
                .table
                .iter()
                .map(|(mq, offset)| (mq.clone(), offset))
                .collect(),
        };
        let client = self.client.clone();
        let group = self.group.clone();
        let backend = self.backend.clone();
        // The offset file holds every queue: only the local backend needs the whole table
        // (a remote persist of one queue must not copy thousands of entries).
        let whole_table: BTreeMap<MessageQueue, i64> = match &self.backend {
            OffsetBackend::LocalFile(_) => self
                .table
                .iter()
                .map(|(mq, offset)| (mq.clone(), offset))
                .collect(),
            OffsetBackend::Remote => BTreeMap::new(),
        };
        async move {
            match backend {
                OffsetBackend::Remote => persist_remote(&client, &group, &entries, sync).await,
                OffsetBackend::LocalFile(path) => {
                    let text = encode_local_offsets(&whole_table);
                    let shown = path.display().to_string();
                    actix_rt::task::spawn_blocking(move || {
                        offset::fs::write_atomically(&path, text.as_bytes())
                    })
                    .await
                    .map_err(|e| Error::Shutdown(format!("offset file writer for {shown}: {e}")))?
                    .map_err(|source| Error::OffsetFile {
                        path: shown,
                        source,
                    })?;
                    Ok((entries, None))
                }
            }
            .map(|(written, failed)| (written, failed, whole_table))
        }
        .into_actor(self)
        .map(|result, act, _ctx| {
            let (persisted, failed, whole_table) = result?;
            if matches!(act.backend, OffsetBackend::LocalFile(_)) {
                act.loaded = whole_table;
            }
            for (mq, offset) in persisted {
                act.table.mark_persisted(&mq, offset);
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }
}

/// Sends UPDATE_CONSUMER_OFFSET for each entry to its broker's master: one-way for the periodic
/// persist (as Java), request/response, all at once, when `sync` (commits, queue drops, resets,
/// shutdown) so the caller knows the broker has it. Returns the entries that were written and,
/// when some were not, the first error (an error outright when none was written one-way).
async fn persist_remote(
    client: &Client,
    group: &str,
    entries: &[(MessageQueue, i64)],
    sync: bool,
) -> Result<(Vec<(MessageQueue, i64)>, Option<Error>)> {
    let outcomes: Vec<Result<()>> = if sync {
        futures::future::join_all(
            entries
                .iter()
                .map(|(mq, offset)| client.update_consumer_offset(group, mq, *offset)),
        )
        .await
    } else {
        let mut outcomes = Vec::with_capacity(entries.len());
        for (mq, offset) in entries {
            outcomes.push(
                client
                    .update_consumer_offset_oneway(group, mq, *offset)
                    .await,
            );
        }
        outcomes
    };
    let mut written = Vec::new();
    let mut first_error = None;
    for ((mq, offset), outcome) in entries.iter().zip(outcomes) {
        match outcome {
            Ok(()) => written.push((mq.clone(), *offset)),
            Err(e) => {
                tracing::warn!(queue = %mq, offset, error = %e, "offset not persisted");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if written.is_empty() && !sync => Err(e),
        Some(e) if sync => Ok((written, Some(e))),
        _ => Ok((written, None)),
    }
}

/// The table survives a restart (an actor's fields do): a restarted store only re-arms its
/// persist timer; a persist that was under way runs again at the next tick.
impl Supervised for OffsetStore {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        if !self.retired {
            tracing::warn!(group = %self.group, "offset store failed; restarted");
        }
    }
}

impl Actor for OffsetStore {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(65_536);
        if self.retired {
            return;
        }
        ctx.run_interval(self.persist_interval, |act, ctx| {
            let persist = act.persist_future(None, false).map(|result, _act, _ctx| {
                if let Err(e) = result {
                    tracing::warn!(error = %e, "periodic offset persist failed");
                }
            });
            ctx.spawn(persist);
        });
    }
}

impl Handler<LoadOffset> for OffsetStore {
    type Result = ResponseActFuture<Self, StoredOffset>;

    fn handle(&mut self, msg: LoadOffset, _ctx: &mut Self::Context) -> Self::Result {
        let mq = msg.queue;
        let exact = msg.exact;
        if let OffsetBackend::LocalFile(_) = self.backend {
            let stored = match self.loaded.get(&mq) {
                Some(offset) => StoredOffset::Found(*offset),
                None => StoredOffset::NotFound,
            };
            return Box::pin(fut::ready(stored));
        }
        let client = self.client.clone();
        let group = self.group.clone();
        Box::pin(
            async move {
                let answer = client.query_consumer_offset_with(&group, &mq, !exact).await;
                match answer {
                    Ok(Some(offset)) => StoredOffset::Found(offset),
                    Ok(None) => StoredOffset::NotFound,
                    Err(e) => {
                        tracing::debug!(queue = %mq, error = %e, "cannot read the stored offset");
                        StoredOffset::Unavailable
                    }
                }
            }
            .into_actor(self),
        )
    }
}

impl Handler<ReadOffset> for OffsetStore {
    type Result = Option<i64>;

    fn handle(&mut self, msg: ReadOffset, _ctx: &mut Self::Context) -> Option<i64> {
        self.live.fold(&mut self.table, &msg.0);
        self.table.read(&msg.0)
    }
}

impl Handler<AttachCommitted> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: AttachCommitted, _ctx: &mut Self::Context) {
        self.live.attach(&mut self.table, &msg.queue, msg.committed);
    }
}

impl Handler<DetachCommitted> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: DetachCommitted, _ctx: &mut Self::Context) {
        self.live
            .detach(&mut self.table, &msg.queue, &msg.committed);
    }
}

impl Handler<StoreOffset> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: StoreOffset, _ctx: &mut Self::Context) {
        self.table.update(&msg.queue, msg.offset, false);
    }
}

impl Handler<SetOffset> for OffsetStore {
    type Result = ResponseActFuture<Self, Result<()>>;

    fn handle(&mut self, msg: SetOffset, _ctx: &mut Self::Context) -> Self::Result {
        // Commits published before the reset count before it, as the updates they replace
        // did (a queue actor publishes the reset offset itself before it sends this).
        self.live.fold(&mut self.table, &msg.queue);
        if msg.freeze {
            self.table.update_and_freeze(&msg.queue, msg.offset);
        } else {
            self.table.reset(&msg.queue, msg.offset);
        }
        Box::pin(self.persist_future(Some(&msg.queue), true))
    }
}

impl Handler<PersistAndRemove> for OffsetStore {
    type Result = ResponseActFuture<Self, Result<()>>;

    fn handle(&mut self, msg: PersistAndRemove, _ctx: &mut Self::Context) -> Self::Result {
        let mq = msg.0;
        Box::pin(
            self.persist_future(Some(&mq), true)
                .map(move |result, act, _ctx| {
                    // Local mode keeps the entry: the file holds every queue ever consumed.
                    if matches!(act.backend, OffsetBackend::Remote) {
                        act.table.remove(&mq);
                    }
                    result
                }),
        )
    }
}

impl Handler<PersistAll> for OffsetStore {
    type Result = ResponseActFuture<Self, Result<()>>;

    fn handle(&mut self, _msg: PersistAll, _ctx: &mut Self::Context) -> Self::Result {
        Box::pin(self.persist_future(None, true))
    }
}

impl Handler<CacheOffset> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: CacheOffset, _ctx: &mut Self::Context) {
        self.table.load(&msg.queue, msg.offset);
    }
}

impl Handler<SetOwnership> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: SetOwnership, _ctx: &mut Self::Context) {
        self.ownership = Some(msg);
    }
}

impl Handler<Snapshot> for OffsetStore {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _msg: Snapshot, _ctx: &mut Self::Context) -> Self::Result {
        self.live.fold_all(&mut self.table);
        MessageResult(
            self.table
                .iter()
                .map(|(mq, offset)| (mq.clone(), offset))
                .collect(),
        )
    }
}
