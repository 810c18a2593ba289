//! The lite pull consumer's bookkeeping as a state machine: the buffer of pulled batches, each
//! assigned queue's positions (the "consumed" offset after the last message handed to the
//! application, where the next pull reads), its epoch, its flow-control counts and pause.
//!
//! [`LiteCore`] takes what happens — an assignment, a pull's answer, a poll, a seek, a pause,
//! a reset pushed by the broker, a stream that stopped half-way through a batch — and returns
//! [`LiteAction`]s for its executor: start or stop a queue's pull loop, restart one at an
//! offset, wake a throttled one, store a consumed offset. The actor `LiteRoot` executes them
//! with actix; the simulator executes them on simulated time.
//!
//! At-least-once: only offsets of messages a poll returned (for a stream: that it yielded)
//! are ever stored. Every repositioning bumps the queue's epoch, so a pull under way when it
//! happened is discarded on delivery.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::consumer::pull_config::{may_pull_lite, LitePullConsumerConfig};
use crate::message::decode::count_records;
use crate::message::{MessageExt, MessageQueue};
use crate::rpc::{decode_pulled, PullRequest, PullStatus, Subscription};

/// Wait before re-asking for admission when the cache is full (Java 50 ms).
pub(crate) const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// Wait before re-asking for admission while paused (Java 1 s; a resume wakes the queue).
pub(crate) const PAUSED_DELAY: Duration = Duration::from_secs(1);

/// Names a queue's slot on the data path, where looking a queue up by name (two strings) for
/// every batch cost more than the rest of the work. The generation tells a reused index's new
/// queue from the old one, whose pull loop may still be sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SlotId {
    index: u32,
    generation: u32,
}

/// What one poll took from the buffer: the messages, and for a tracked take (the stream) the
/// mark the taker moves as it hands them out.
#[derive(Default)]
pub(crate) struct Taken {
    pub(crate) messages: Vec<MessageExt>,
    /// The queue's slot (meaningless in an empty `Taken`).
    pub(crate) slot: Option<SlotId>,
    pub(crate) epoch: u64,
    /// The batch's end (see [`Batch::next_offset`]).
    pub(crate) next_offset: i64,
    pub(crate) mark: Option<Arc<TakenMark>>,
}

/// How far a stream has handed out a tracked batch: the offset after the last message it
/// yielded, or -1 before the first. The core folds it into the consumed position at commits.
/// (Atomics because the stream moves it from another task without a message per item.)
pub(crate) struct TakenMark {
    pub(crate) slot: SlotId,
    pub(crate) epoch: u64,
    pub(crate) next: AtomicI64,
    /// What `next` becomes once the last message is yielded (filtered-out offsets included).
    pub(crate) end: i64,
    /// Set when the queue is sought, reset, paused or dropped: the stream hands out no more
    /// of this batch.
    pub(crate) stale: AtomicBool,
}

/// A pulled batch in the buffer.
struct Batch {
    slot: SlotId,
    epoch: u64,
    content: Content,
    /// Messages counted for flow control (the body's records, or the decoded messages).
    count: u64,
    bytes: u64,
    /// Where the pull began: a body that cannot be decoded is pulled again from here.
    from_offset: i64,
    /// The offset after the batch, filtered-out messages included: the consumed position once
    /// all of it is taken.
    next_offset: i64,
}

/// A batch's messages: as they came off the wire (decoded when the application takes them, so
/// a buffer of thousands stays compact and a taken batch is decoded hot in the cache), or
/// decoded already (a batch given back); none at all marks a run of filtered-out offsets.
enum Content {
    Wire {
        body: bytes::Bytes,
        offset_delta: Option<i64>,
    },
    Decoded(Vec<MessageExt>),
}

/// Whether a queue's pull loop may pull now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Go,
    Wait(Duration),
    /// The loop is of an old epoch, or its queue is gone: it waits for a restart or a stop.
    Stale,
}

/// A pull's answer, its messages not decoded yet.
pub(crate) struct Delivery {
    pub(crate) slot: SlotId,
    pub(crate) epoch: u64,
    pub(crate) status: PullStatus,
    /// The offset the pull asked for.
    pub(crate) from_offset: i64,
    pub(crate) next_offset: i64,
    /// The stored records.
    pub(crate) body: bytes::Bytes,
    pub(crate) offset_delta: Option<i64>,
}

/// What the executor must do after a core call.
#[derive(Debug, Clone)]
pub(crate) enum LiteAction {
    /// Start a pull loop for the queue: find its start offset (stored offset, else
    /// `consume_from_where`), report it with [`LiteCore::on_started`], then ask
    /// [`LiteCore::admit`] before each pull and hand answers to [`LiteCore::on_delivery`].
    /// `request` is the loop's pull (queue, subscription, batch size, long poll), its offset
    /// still to be set.
    Start {
        slot: SlotId,
        request: Box<PullRequest>,
    },
    /// Stop the queue's pull loop.
    Stop(SlotId),
    /// Restart the loop at `offset` in `epoch`, pulling after `delay`.
    Restart {
        slot: SlotId,
        epoch: u64,
        offset: i64,
        delay: Duration,
    },
    /// Pull again now (a resume, or room made in the cache); `admitted`: the core already
    /// admitted the next pull of that epoch.
    Wake { slot: SlotId, admitted: Option<u64> },
    /// Store the consumed offset in the offset store (persisted on its schedule).
    Store { queue: MessageQueue, offset: i64 },
    /// Worth a log line.
    Note(LiteNote),
}

/// Events worth a log line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LiteNote {
    QueueStarted(MessageQueue),
    QueueStopped(MessageQueue),
    /// The broker answered OFFSET_ILLEGAL: the queue continues from its suggestion.
    OffsetMoved {
        queue: MessageQueue,
        offset: i64,
    },
    /// A reset pushed by the broker repositioned the queue.
    OffsetReset {
        queue: MessageQueue,
        offset: i64,
    },
    /// A pulled batch could not be decoded; it is pulled again after a pause.
    Undecodable {
        queue: MessageQueue,
        offset: i64,
        error: String,
    },
    /// A stream was dropped half-way through a batch; the queue reads again from `offset`.
    StreamDropped {
        queue: MessageQueue,
        offset: i64,
    },
}

/// The core's view of one assigned queue.
struct Slot {
    queue: MessageQueue,
    /// What the queue is pulled for (the re-filter when a batch is decoded).
    subscription: Arc<Subscription>,
    /// Batches of this queue in the buffer.
    queued: usize,
    /// A consumed position to adopt once no stream holds a batch of this queue any more.
    pending_consumed: Option<i64>,
    epoch: u64,
    /// The offset after the last message handed out (what a commit stores).
    consumed: Option<i64>,
    /// What the last commit stored: the offset the queue's pulls carry to the broker.
    stored: Option<i64>,
    /// The offset the next pull reads from (for the span).
    pulled_to: Option<i64>,
    cached_count: u64,
    cached_bytes: u64,
    paused: bool,
}

/// The queues: by id on the data path, by name for the application's calls.
#[derive(Default)]
struct Slots {
    entries: Vec<(u32, Option<Slot>)>,
    free: Vec<u32>,
    by_name: BTreeMap<MessageQueue, SlotId>,
}

impl Slots {
    fn insert(&mut self, slot: Slot) -> SlotId {
        let id = match self.free.pop() {
            Some(index) => {
                let entry = &mut self.entries[index as usize];
                entry.0 = entry.0.wrapping_add(1);
                SlotId {
                    index,
                    generation: entry.0,
                }
            }
            None => {
                self.entries.push((0, None));
                SlotId {
                    index: (self.entries.len() - 1) as u32,
                    generation: 0,
                }
            }
        };
        self.by_name.insert(slot.queue.clone(), id);
        self.entries[id.index as usize].1 = Some(slot);
        id
    }

    fn remove(&mut self, queue: &MessageQueue) -> Option<(SlotId, Slot)> {
        let id = self.by_name.remove(queue)?;
        self.free.push(id.index);
        Some((id, self.entries.get_mut(id.index as usize)?.1.take()?))
    }

    fn id(&self, queue: &MessageQueue) -> Option<SlotId> {
        self.by_name.get(queue).copied()
    }

    fn at(&self, id: SlotId) -> Option<&Slot> {
        match self.entries.get(id.index as usize) {
            Some((generation, Some(slot))) if *generation == id.generation => Some(slot),
            _ => None,
        }
    }

    fn at_mut(&mut self, id: SlotId) -> Option<&mut Slot> {
        match self.entries.get_mut(id.index as usize) {
            Some((generation, Some(slot))) if *generation == id.generation => Some(slot),
            _ => None,
        }
    }

    #[cfg(test)]
    fn get_mut(&mut self, queue: &MessageQueue) -> Option<&mut Slot> {
        self.at_mut(self.id(queue)?)
    }

    fn keys(&self) -> impl Iterator<Item = &MessageQueue> {
        self.by_name.keys()
    }
}

/// The lite pull consumer's buffer and positions (see the module documentation).
pub(crate) struct LiteCore {
    config: LitePullConsumerConfig,
    subscriptions: BTreeMap<String, Arc<Subscription>>,
    queues: Slots,
    buffer: VecDeque<Batch>,
    buffered: u64,
    /// Queues told to wait for room in the cache: woken as soon as a poll makes some.
    throttled: BTreeSet<SlotId>,
    /// Tracked batches still being handed out by streams.
    marks: Vec<Arc<TakenMark>>,
    /// Queues with a `pending_consumed` waiting for their streams' batches.
    pending_advances: Vec<SlotId>,
    stopping: bool,
}

impl LiteCore {
    /// A core for `config`, pulling each topic of `subscriptions` with its subscription (other
    /// topics, assigned by hand, with all of their messages).
    pub(crate) fn new(
        config: LitePullConsumerConfig,
        subscriptions: BTreeMap<String, Arc<Subscription>>,
    ) -> Self {
        LiteCore {
            config,
            subscriptions,
            queues: Slots::default(),
            buffer: VecDeque::new(),
            buffered: 0,
            throttled: BTreeSet::new(),
            marks: Vec::new(),
            pending_advances: Vec::new(),
            stopping: false,
        }
    }

    /// The queues pulled now.
    pub(crate) fn assignment(&self) -> Vec<MessageQueue> {
        self.queues.keys().cloned().collect()
    }

    /// Whether `queue` is assigned.
    #[cfg(test)]
    pub(crate) fn is_assigned(&self, queue: &MessageQueue) -> bool {
        self.queues.id(queue).is_some()
    }

    /// Messages in the buffer (flow control's total).
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> u64 {
        self.buffered
    }

    /// The queue's consumed offset, as a commit would store it.
    #[cfg(test)]
    pub(crate) fn consumed(&mut self, queue: &MessageQueue) -> Option<i64> {
        self.fold_marks();
        self.queues.get_mut(queue).and_then(|s| s.consumed)
    }

    /// Pulls exactly `queues` (of `topic` only, when given) from now on: starts a loop for
    /// each new queue, stops and forgets the others. Returns the queues that went away.
    pub(crate) fn set_assignment(
        &mut self,
        queues: &[MessageQueue],
        topic: Option<&str>,
        out: &mut Vec<LiteAction>,
    ) -> Vec<MessageQueue> {
        let wanted: BTreeSet<&MessageQueue> = queues.iter().collect();
        let gone: Vec<MessageQueue> = self
            .queues
            .keys()
            .filter(|q| topic.is_none_or(|t| q.topic == t) && !wanted.contains(q))
            .cloned()
            .collect();
        for queue in &gone {
            self.drop_queue(queue, out);
        }
        if self.stopping {
            return gone;
        }
        for queue in queues {
            if self.queues.id(queue).is_some() {
                continue;
            }
            let subscription = self
                .subscriptions
                .get(&queue.topic)
                .cloned()
                .unwrap_or_else(|| Arc::new(Subscription::all(0)));
            let slot = self.queues.insert(Slot {
                queue: queue.clone(),
                subscription: subscription.clone(),
                queued: 0,
                pending_consumed: None,
                epoch: 0,
                consumed: None,
                stored: None,
                pulled_to: None,
                cached_count: 0,
                cached_bytes: 0,
                paused: false,
            });
            let mut request =
                PullRequest::new(self.config.base.consumer_group.as_str(), queue.clone(), 0)
                    .subscription(subscription)
                    .max_messages(self.config.pull_batch_size as i32);
            request.suspend = Some(self.config.base.broker_suspend_max_time);
            request.timeout = self.config.base.consumer_timeout_when_suspend;
            out.push(LiteAction::Start {
                slot,
                request: Box::new(request),
            });
            out.push(LiteAction::Note(LiteNote::QueueStarted(queue.clone())));
        }
        gone
    }

    fn drop_queue(&mut self, queue: &MessageQueue, out: &mut Vec<LiteAction>) {
        if let Some(id) = self.queues.id(queue) {
            self.discard_slot(id);
        }
        if let Some((id, _)) = self.queues.remove(queue) {
            self.throttled.remove(&id);
            out.push(LiteAction::Stop(id));
            out.push(LiteAction::Note(LiteNote::QueueStopped(queue.clone())));
        }
    }

    fn discard_slot(&mut self, id: SlotId) {
        for mark in self.marks.iter().filter(|m| m.slot == id) {
            mark.stale.store(true, Ordering::SeqCst);
        }
        let mut dropped = 0u64;
        self.buffer.retain(|b| {
            let keep = b.slot != id;
            if !keep {
                dropped += b.count;
            }
            keep
        });
        self.buffered = self.buffered.saturating_sub(dropped);
        if let Some(slot) = self.queues.at_mut(id) {
            slot.cached_count = 0;
            slot.cached_bytes = 0;
            slot.queued = 0;
            slot.pending_consumed = None;
        }
    }

    /// Repositions the slot at `offset`: a new epoch, the buffer emptied of it, its loop
    /// restarted there after `delay`, and `offset` as its consumed position.
    fn reposition(&mut self, id: SlotId, offset: i64, delay: Duration, out: &mut Vec<LiteAction>) {
        self.discard_slot(id);
        if let Some(slot) = self.queues.at_mut(id) {
            slot.epoch += 1;
            slot.consumed = Some(offset);
            slot.pulled_to = Some(offset);
            out.push(LiteAction::Restart {
                slot: id,
                epoch: slot.epoch,
                offset,
                delay,
            });
        }
    }

    /// The next poll returns `queue`'s messages from `offset`. Returns whether it is
    /// assigned.
    pub(crate) fn seek(
        &mut self,
        queue: &MessageQueue,
        offset: i64,
        out: &mut Vec<LiteAction>,
    ) -> bool {
        let Some(id) = self.queues.id(queue) else {
            return false;
        };
        self.reposition(id, offset, Duration::ZERO, out);
        true
    }

    /// Offsets reset by the broker (RESET_CONSUMER_CLIENT_OFFSET) for the queues assigned here.
    pub(crate) fn on_offsets_reset(
        &mut self,
        table: &[(MessageQueue, i64)],
        out: &mut Vec<LiteAction>,
    ) {
        for (queue, offset) in table {
            if let Some(id) = self.queues.id(queue) {
                out.push(LiteAction::Note(LiteNote::OffsetReset {
                    queue: queue.clone(),
                    offset: *offset,
                }));
                self.reposition(id, *offset, Duration::ZERO, out);
            }
        }
    }

    /// Pauses (`true`) or resumes `queues`. What was buffered for a paused queue is pulled
    /// again after the resume, from its consumed point.
    pub(crate) fn set_paused(
        &mut self,
        queues: &[MessageQueue],
        paused: bool,
        out: &mut Vec<LiteAction>,
    ) {
        if paused {
            // Pausing rewinds to what the application has taken, streams included.
            self.fold_marks();
        }
        for queue in queues {
            let Some(id) = self.queues.id(queue) else {
                continue;
            };
            let Some(slot) = self.queues.at_mut(id) else {
                continue;
            };
            if slot.paused == paused {
                continue;
            }
            slot.paused = paused;
            if paused {
                match slot.consumed {
                    Some(offset) => self.reposition(id, offset, Duration::ZERO, out),
                    None => self.discard_slot(id),
                }
            } else {
                out.push(LiteAction::Wake {
                    slot: id,
                    admitted: None,
                });
            }
        }
    }

    /// Moves each queue's consumed position past what the streams have yielded; forgets the
    /// marks of batches the streams are done with.
    fn fold_marks(&mut self) {
        let queues = &mut self.queues;
        self.marks.retain(|mark| {
            let next = mark.next.load(Ordering::Relaxed);
            if let Some(slot) = queues.at_mut(mark.slot) {
                if slot.epoch == mark.epoch && next >= 0 {
                    slot.consumed = Some(slot.consumed.map_or(next, |c| c.max(next)));
                }
            }
            Arc::strong_count(mark) > 1
        });
        if !self.pending_advances.is_empty() {
            let pending = std::mem::take(&mut self.pending_advances);
            for id in pending {
                if let Some(offset) = self
                    .queues
                    .at_mut(id)
                    .and_then(|s| s.pending_consumed.take())
                {
                    self.advance_consumed(id, offset);
                }
            }
        }
    }

    /// Moves the queue's consumed position to `offset` (after a run of filtered-out messages):
    /// now, or once no stream holds an earlier batch of it.
    fn advance_consumed(&mut self, id: SlotId, offset: i64) {
        let held = self
            .marks
            .iter()
            .any(|m| m.slot == id && Arc::strong_count(m) > 1);
        let Some(slot) = self.queues.at_mut(id) else {
            return;
        };
        if held {
            slot.pending_consumed = Some(slot.pending_consumed.map_or(offset, |p| p.max(offset)));
            if !self.pending_advances.contains(&id) {
                self.pending_advances.push(id);
            }
        } else {
            slot.consumed = Some(slot.consumed.map_or(offset, |c| c.max(offset)));
        }
    }

    /// Stores every consumed position (the offset store persists them on its schedule).
    pub(crate) fn commit_consumed(&mut self, out: &mut Vec<LiteAction>) {
        self.fold_marks();
        let ids: Vec<SlotId> = self.queues.by_name.values().copied().collect();
        for id in ids {
            let Some(slot) = self.queues.at_mut(id) else {
                continue;
            };
            if let Some(offset) = slot.consumed {
                slot.stored = Some(offset);
                out.push(LiteAction::Store {
                    queue: slot.queue.clone(),
                    offset,
                });
            }
        }
    }

    /// The offset the last commit stored for `id`: a pull carries it, so the broker holds what
    /// was committed within a pull of it rather than at the next periodic persist (a member
    /// killed with -9 then hands on little more than its last auto-commit interval).
    pub(crate) fn stored_offset(&self, id: SlotId) -> Option<i64> {
        self.queues.at(id).and_then(|slot| slot.stored)
    }

    /// Stops every queue (after the executor committed, when auto-committing); further
    /// assignments start nothing.
    pub(crate) fn shutdown(&mut self, out: &mut Vec<LiteAction>) {
        self.stopping = true;
        let queues: Vec<MessageQueue> = self.queues.keys().cloned().collect();
        for queue in queues {
            self.drop_queue(&queue, out);
        }
    }

    /// The next deliverable batch, its positions recorded as consumed — at once, or for a
    /// tracked take as the stream moves its mark.
    pub(crate) fn take_batch(&mut self, tracked: bool, out: &mut Vec<LiteAction>) -> Option<Taken> {
        while let Some(batch) = self.buffer.pop_front() {
            self.buffered = self.buffered.saturating_sub(batch.count);
            let id = batch.slot;
            let Some(slot) = self.queues.at_mut(id) else {
                continue;
            };
            slot.queued = slot.queued.saturating_sub(1);
            if slot.epoch != batch.epoch {
                continue;
            }
            slot.cached_count = slot.cached_count.saturating_sub(batch.count);
            slot.cached_bytes = slot.cached_bytes.saturating_sub(batch.bytes);
            let decoded = match batch.content {
                Content::Decoded(messages) => Ok(messages),
                Content::Wire { body, offset_delta } => {
                    decode_pulled(&body, &slot.subscription, &slot.queue, offset_delta)
                        .map(|(messages, _)| messages)
                }
            };
            // Room was made: throttled queues that would now be admitted ask again at once
            // rather than at their timer. Only this queue's own limits moved, unless the whole
            // buffer just fell under its limit — then every throttled queue may go.
            let limit = u64::from(self.config.pull_threshold_for_all);
            if self.buffered < limit && self.buffered + batch.count >= limit {
                self.wake_admissible(out);
            } else if self.throttled.contains(&id) {
                self.wake_one(id, out);
            }
            let messages = match decoded {
                Ok(messages) => messages,
                Err(e) => {
                    // Nothing of it was handed out: the queue reads it again after a pause.
                    if let Some(slot) = self.queues.at(id) {
                        out.push(LiteAction::Note(LiteNote::Undecodable {
                            queue: slot.queue.clone(),
                            offset: batch.from_offset,
                            error: e.to_string(),
                        }));
                    }
                    let delay = self.config.pull_delay_on_exception;
                    self.reposition(id, batch.from_offset, delay, out);
                    continue;
                }
            };
            if messages.is_empty() {
                // All filtered out (or a marker of such a run): consumed past it, in order.
                self.advance_consumed(id, batch.next_offset);
                continue;
            }
            let mark = if tracked {
                let mark = Arc::new(TakenMark {
                    slot: id,
                    epoch: batch.epoch,
                    next: AtomicI64::new(-1),
                    end: batch.next_offset,
                    stale: AtomicBool::new(false),
                });
                self.marks.push(mark.clone());
                Some(mark)
            } else {
                if let Some(slot) = self.queues.at_mut(id) {
                    slot.consumed = Some(batch.next_offset);
                }
                None
            };
            return Some(Taken {
                messages,
                slot: Some(id),
                epoch: batch.epoch,
                next_offset: batch.next_offset,
                mark,
            });
        }
        None
    }

    /// Whether a buffered batch may be deliverable (a poll waiting for one should try).
    pub(crate) fn has_buffered(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// A queue's loop asks whether it may pull from `offset` now, in `epoch`.
    pub(crate) fn admit(&mut self, id: SlotId, epoch: u64, offset: i64) -> Admission {
        // The span is measured from what the application has taken, streams included.
        self.fold_marks();
        let stopping = self.stopping;
        let Some(slot) = self.queues.at_mut(id) else {
            return Admission::Stale;
        };
        if slot.epoch != epoch || stopping {
            return Admission::Stale;
        }
        if slot.paused {
            return Admission::Wait(PAUSED_DELAY);
        }
        slot.pulled_to = Some(offset);
        let Some(slot) = self.queues.at(id) else {
            return Admission::Stale;
        };
        if self.admissible(slot, offset) {
            Admission::Go
        } else {
            self.throttled.insert(id);
            Admission::Wait(FLOW_CONTROL_DELAY)
        }
    }

    /// A queue's loop found where to start.
    pub(crate) fn on_started(&mut self, id: SlotId, offset: i64) {
        if let Some(slot) = self.queues.at_mut(id) {
            slot.consumed.get_or_insert(offset);
            slot.pulled_to.get_or_insert(offset);
        }
    }

    /// A pull's answer. Returns whether the pull after it may go at once (`Go` only; anything
    /// else is decided by the loop's next [`LiteCore::admit`]).
    pub(crate) fn on_delivery(
        &mut self,
        delivery: Delivery,
        out: &mut Vec<LiteAction>,
    ) -> Admission {
        let (id, epoch, next) = (delivery.slot, delivery.epoch, delivery.next_offset);
        self.deliver(delivery, out);
        self.admit_next(id, epoch, next)
    }

    fn deliver(&mut self, msg: Delivery, out: &mut Vec<LiteAction>) {
        let Some(slot) = self.queues.at(msg.slot) else {
            return;
        };
        if slot.epoch != msg.epoch || slot.paused {
            return;
        }
        if msg.status == PullStatus::OffsetIllegal {
            // Out of range, or reset on the broker (server-side reset): continue from where
            // the broker says, as the consumed position too.
            out.push(LiteAction::Note(LiteNote::OffsetMoved {
                queue: slot.queue.clone(),
                offset: msg.next_offset,
            }));
            self.reposition(msg.slot, msg.next_offset, Duration::ZERO, out);
            return;
        }
        let count = count_records(&msg.body) as u64;
        let queued = slot.queued;
        if count == 0 {
            // Nothing (matching) there. Past a run of filtered-out messages the consumed
            // position moves on — behind the batches still buffered, so in order.
            if msg.next_offset > msg.from_offset {
                if queued == 0 {
                    self.advance_consumed(msg.slot, msg.next_offset);
                } else {
                    self.buffer.push_back(Batch {
                        slot: msg.slot,
                        epoch: msg.epoch,
                        content: Content::Decoded(Vec::new()),
                        count: 0,
                        bytes: 0,
                        from_offset: msg.from_offset,
                        next_offset: msg.next_offset,
                    });
                    if let Some(slot) = self.queues.at_mut(msg.slot) {
                        slot.queued += 1;
                    }
                }
            }
            return;
        }
        let bytes = msg.body.len() as u64;
        if let Some(slot) = self.queues.at_mut(msg.slot) {
            slot.cached_count += count;
            slot.cached_bytes += bytes;
            slot.queued += 1;
        }
        self.buffered += count;
        self.buffer.push_back(Batch {
            slot: msg.slot,
            epoch: msg.epoch,
            content: Content::Wire {
                body: msg.body,
                offset_delta: msg.offset_delta,
            },
            count,
            bytes,
            from_offset: msg.from_offset,
            next_offset: msg.next_offset,
        });
    }

    /// A stream dropped a tracked batch before yielding `offset` and what follows: the queue
    /// reads again from there.
    pub(crate) fn on_untaken(
        &mut self,
        id: SlotId,
        epoch: u64,
        offset: i64,
        out: &mut Vec<LiteAction>,
    ) {
        self.fold_marks();
        let Some(slot) = self.queues.at(id) else {
            return;
        };
        if slot.epoch == epoch && !self.stopping {
            out.push(LiteAction::Note(LiteNote::StreamDropped {
                queue: slot.queue.clone(),
                offset,
            }));
            self.reposition(id, offset, Duration::ZERO, out);
        }
    }

    /// Whether `slot`'s queue may pull now (flow control: its cache, its span, the whole
    /// buffer).
    fn admissible(&self, slot: &Slot, offset: i64) -> bool {
        let span = slot
            .consumed
            .map_or(0, |consumed| (offset - consumed).max(0) as u64);
        may_pull_lite(
            &self.config,
            slot.cached_count,
            slot.cached_bytes,
            span,
            self.buffered,
        )
    }

    fn admit_next(&mut self, id: SlotId, epoch: u64, offset: i64) -> Admission {
        if self.stopping {
            return Admission::Stale;
        }
        let Some(slot) = self.queues.at(id) else {
            return Admission::Stale;
        };
        if slot.epoch != epoch || slot.paused || !self.admissible(slot, offset) {
            return Admission::Wait(Duration::ZERO);
        }
        if let Some(slot) = self.queues.at_mut(id) {
            slot.pulled_to = Some(offset);
        }
        Admission::Go
    }

    /// Wakes `id` if it is throttled and flow control would admit it now.
    fn wake_one(&mut self, id: SlotId, out: &mut Vec<LiteAction>) {
        self.fold_marks();
        if self.wake_if_admissible(id, out) {
            self.throttled.remove(&id);
        }
    }

    /// Wakes the throttled queues that flow control would admit now.
    fn wake_admissible(&mut self, out: &mut Vec<LiteAction>) {
        self.fold_marks();
        let mut throttled = std::mem::take(&mut self.throttled);
        throttled.retain(|&id| !self.wake_if_admissible(id, out));
        self.throttled = throttled;
    }

    /// Tells a throttled queue to pull, already admitted, if flow control lets it now. Returns
    /// whether it no longer waits (woken, or gone).
    fn wake_if_admissible(&self, id: SlotId, out: &mut Vec<LiteAction>) -> bool {
        let Some(slot) = self.queues.at(id) else {
            return true;
        };
        if !self.admissible(slot, slot.pulled_to.unwrap_or(0)) {
            return false;
        }
        out.push(LiteAction::Wake {
            slot: id,
            admitted: Some(slot.epoch),
        });
        true
    }

    /// Undoes a [`LiteCore::take_batch`] whose poller vanished.
    pub(crate) fn push_front_again(&mut self, taken: Taken) {
        let Taken {
            messages,
            slot: id,
            epoch,
            next_offset,
            mark,
        } = taken;
        if let Some(mark) = &mark {
            self.marks.retain(|m| !Arc::ptr_eq(m, mark));
        }
        let (Some(first), Some(id)) = (messages.first(), id) else {
            return;
        };
        let Some(slot) = self.queues.at_mut(id) else {
            return;
        };
        if epoch != slot.epoch {
            return; // sought or reset meanwhile: the batch is stale
        }
        let bytes: u64 = messages.iter().map(|m| m.body().len() as u64).sum();
        let count = messages.len() as u64;
        let from_offset = first.queue_offset;
        slot.cached_count += count;
        slot.cached_bytes += bytes;
        slot.consumed = Some(from_offset);
        slot.queued += 1;
        self.buffered += count;
        self.buffer.push_front(Batch {
            slot: id,
            epoch: slot.epoch,
            content: Content::Decoded(messages),
            count,
            bytes,
            from_offset,
            next_offset,
        });
    }

    /// Per assigned queue: cached messages (flow control's per-queue count).
    #[cfg(test)]
    pub(crate) fn cached(&self) -> Vec<(MessageQueue, u64)> {
        self.queues
            .by_name
            .iter()
            .filter_map(|(q, id)| Some((q.clone(), self.queues.at(*id)?.cached_count)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;
    use crate::message::{encode_stored_message, Message};

    fn queue(id: i32) -> MessageQueue {
        MessageQueue::new("T", "b", id)
    }

    fn core() -> LiteCore {
        let mut config = LitePullConsumerConfig::new("G");
        config.pull_threshold_for_queue = 4;
        config.pull_threshold_for_all = 100;
        let subscriptions = BTreeMap::from([("T".to_string(), Arc::new(Subscription::all(0)))]);
        LiteCore::new(config, subscriptions)
    }

    /// Starts `queues`, each at offset 0; returns their slots.
    fn assigned(core: &mut LiteCore, queues: &[MessageQueue]) -> Vec<SlotId> {
        let mut out = Vec::new();
        core.set_assignment(queues, None, &mut out);
        let slots: Vec<SlotId> = out
            .iter()
            .filter_map(|a| match a {
                LiteAction::Start { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        for slot in &slots {
            core.on_started(*slot, 0);
        }
        slots
    }

    fn body(queue: &MessageQueue, offsets: Range<i64>) -> bytes::Bytes {
        let mut raw = bytes::BytesMut::new();
        for offset in offsets {
            let mut m = MessageExt::from(Message::new(queue.topic.clone(), &b"x"[..]));
            m.queue_id = queue.queue_id;
            m.queue_offset = offset;
            encode_stored_message(&m, &mut raw);
        }
        raw.freeze()
    }

    fn found(slot: SlotId, epoch: u64, queue: &MessageQueue, offsets: Range<i64>) -> Delivery {
        Delivery {
            slot,
            epoch,
            status: PullStatus::Found,
            from_offset: offsets.start,
            next_offset: offsets.end,
            body: body(queue, offsets),
            offset_delta: None,
        }
    }

    fn stores(out: &[LiteAction]) -> Vec<(MessageQueue, i64)> {
        out.iter()
            .filter_map(|a| match a {
                LiteAction::Store { queue, offset } => Some((queue.clone(), *offset)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_what_a_poll_returned_is_stored() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        assert!(!core.has_buffered(), "a waiting poll has nothing to try");
        core.on_delivery(found(slot, 0, &q, 0..3), &mut out);
        core.on_delivery(found(slot, 0, &q, 3..5), &mut out);
        assert!(core.has_buffered(), "a waiting poll is served");
        core.commit_consumed(&mut out);
        assert_eq!(stores(&out), vec![(q.clone(), 0)], "nothing polled yet");
        let taken = core.take_batch(false, &mut out).expect("a batch");
        let offsets: Vec<i64> = taken.messages.iter().map(|m| m.queue_offset).collect();
        assert_eq!(offsets, vec![0, 1, 2]);
        assert_eq!(
            core.stored_offset(slot),
            Some(0),
            "pulls carry what was committed, not what was polled"
        );
        let mut out = Vec::new();
        core.commit_consumed(&mut out);
        assert_eq!(
            stores(&out),
            vec![(q, 3)],
            "the second batch is still buffered"
        );
        assert_eq!(core.stored_offset(slot), Some(3));
    }

    #[test]
    fn a_full_queue_waits_and_is_woken_when_a_poll_makes_room() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        let next = core.on_delivery(found(slot, 0, &q, 0..4), &mut out);
        assert_eq!(
            next,
            Admission::Wait(Duration::ZERO),
            "4 cached of 4 allowed"
        );
        assert_eq!(core.admit(slot, 0, 4), Admission::Wait(FLOW_CONTROL_DELAY));
        let mut out = Vec::new();
        core.take_batch(false, &mut out).expect("a batch");
        assert!(
            out.iter().any(
                |a| matches!(a, LiteAction::Wake { slot: s, admitted: Some(0) } if *s == slot)
            ),
            "the throttled queue is woken, already admitted: {out:?}"
        );
    }

    #[test]
    fn a_batch_whose_poller_vanished_counts_against_the_cache_again() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        core.on_delivery(found(slot, 0, &q, 0..2), &mut out);
        core.on_delivery(found(slot, 0, &q, 2..5), &mut out);
        let taken = core.take_batch(false, &mut out).expect("a batch");
        assert_eq!(core.cached(), vec![(q.clone(), 3)]);
        assert_eq!(core.buffered(), 3);
        core.push_front_again(taken);
        assert_eq!(core.cached(), vec![(q.clone(), 5)]);
        assert_eq!(
            core.buffered(),
            5,
            "the consumer-wide limit counts it again too"
        );
        assert_eq!(core.admit(slot, 0, 5), Admission::Wait(FLOW_CONTROL_DELAY));
        let again = core
            .take_batch(false, &mut out)
            .expect("the same batch again");
        let offsets: Vec<i64> = again.messages.iter().map(|m| m.queue_offset).collect();
        assert_eq!(offsets, vec![0, 1]);
    }

    #[test]
    fn a_paused_queue_pulls_no_more_until_resumed() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        // Nothing taken yet: pausing keeps the epoch (no position to rewind to).
        core.set_paused(std::slice::from_ref(&q), true, &mut out);
        // The answer of the pull that was under way: the loop must not pull again.
        let next = core.on_delivery(found(slot, 0, &q, 0..1), &mut out);
        assert_eq!(next, Admission::Wait(Duration::ZERO));
        let mut out = Vec::new();
        core.set_paused(std::slice::from_ref(&q), false, &mut out);
        assert!(
            out.iter()
                .any(|a| matches!(a, LiteAction::Wake { slot: s, .. } if *s == slot)),
            "{out:?}"
        );
    }

    #[test]
    fn a_seek_drops_the_buffer_and_answers_of_the_old_epoch() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        core.on_delivery(found(slot, 0, &q, 0..2), &mut out);
        assert!(core.seek(&q, 10, &mut out));
        assert!(out.iter().any(|a| matches!(
            a,
            LiteAction::Restart {
                epoch: 1,
                offset: 10,
                ..
            }
        )));
        // A pull of epoch 0 answers late: it admits no pull after it.
        let next = core.on_delivery(found(slot, 0, &q, 2..3), &mut out);
        assert_ne!(next, Admission::Go);
        assert!(
            core.take_batch(false, &mut out).is_none(),
            "nothing of epoch 0 is handed out"
        );
        let next = core.on_delivery(found(slot, 1, &q, 10..12), &mut out);
        assert_eq!(
            next,
            Admission::Go,
            "an answer with room admits the next pull"
        );
        let taken = core
            .take_batch(false, &mut out)
            .expect("the sought messages");
        assert_eq!(taken.messages[0].queue_offset, 10);
        assert!(!core.seek(&queue(9), 0, &mut out), "not assigned");
    }

    #[test]
    fn an_offset_the_broker_refuses_restarts_the_queue_where_it_points() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        let illegal = Delivery {
            status: PullStatus::OffsetIllegal,
            next_offset: 7,
            body: bytes::Bytes::new(),
            ..found(slot, 0, &q, 0..0)
        };
        core.on_delivery(illegal, &mut out);
        assert!(out
            .iter()
            .any(|a| matches!(a, LiteAction::Restart { offset: 7, .. })));
        assert_eq!(core.consumed(&q), Some(7));
    }

    #[test]
    fn a_paused_queue_rewinds_to_what_was_polled_and_waits_for_its_resume() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        core.on_delivery(found(slot, 0, &q, 0..2), &mut out);
        core.set_paused(std::slice::from_ref(&q), true, &mut out);
        assert!(out.iter().any(|a| matches!(
            a,
            LiteAction::Restart {
                offset: 0,
                epoch: 1,
                ..
            }
        )));
        assert!(core.take_batch(false, &mut out).is_none());
        assert_eq!(core.admit(slot, 1, 0), Admission::Wait(PAUSED_DELAY));
        let mut out = Vec::new();
        core.set_paused(std::slice::from_ref(&q), false, &mut out);
        assert!(out
            .iter()
            .any(|a| matches!(a, LiteAction::Wake { admitted: None, .. })));
        assert_eq!(core.admit(slot, 1, 0), Admission::Go);
    }

    #[test]
    fn a_stream_dropped_half_way_reads_again_from_the_first_message_not_yielded() {
        let mut core = core();
        let q = queue(0);
        let slot = assigned(&mut core, std::slice::from_ref(&q))[0];
        let mut out = Vec::new();
        core.on_delivery(found(slot, 0, &q, 0..3), &mut out);
        let taken = core.take_batch(true, &mut out).expect("a tracked batch");
        let mark = taken.mark.expect("a mark");
        // The stream yielded offset 0 only.
        mark.next.store(1, Ordering::Relaxed);
        let mut out = Vec::new();
        core.commit_consumed(&mut out);
        assert_eq!(stores(&out), vec![(q.clone(), 1)]);
        core.on_untaken(slot, 0, 1, &mut out);
        assert!(out
            .iter()
            .any(|a| matches!(a, LiteAction::Restart { offset: 1, .. })));
        assert!(
            mark.stale.load(Ordering::SeqCst),
            "the stream yields no more of it"
        );
    }

    #[test]
    fn a_batch_given_back_leaves_the_other_streams_marks_counted() {
        let mut core = core();
        let (a, b) = (queue(0), queue(1));
        let slots = assigned(&mut core, &[a.clone(), b.clone()]);
        let mut out = Vec::new();
        core.on_delivery(found(slots[0], 0, &a, 0..3), &mut out);
        core.on_delivery(found(slots[1], 0, &b, 0..3), &mut out);
        let first = core
            .take_batch(true, &mut out)
            .expect("a tracked batch of a");
        let second = core
            .take_batch(true, &mut out)
            .expect("a tracked batch of b");
        let mark_of_a = first.mark.clone().expect("a mark");
        // The poller of b's batch vanished; the stream reading a's yielded two messages.
        core.push_front_again(second);
        mark_of_a.next.store(2, Ordering::Relaxed);
        let mut out = Vec::new();
        core.commit_consumed(&mut out);
        assert_eq!(stores(&out), vec![(a, 2), (b, 0)]);
    }

    #[test]
    fn a_revoked_queue_is_stopped_and_reported_gone() {
        let mut core = core();
        let (a, b) = (queue(0), queue(1));
        let slots = assigned(&mut core, &[a.clone(), b.clone()]);
        let mut out = Vec::new();
        core.on_delivery(found(slots[1], 0, &b, 0..2), &mut out);
        let gone = core.set_assignment(std::slice::from_ref(&a), Some("T"), &mut out);
        assert_eq!(gone, vec![b.clone()]);
        assert!(out
            .iter()
            .any(|x| matches!(x, LiteAction::Stop(s) if *s == slots[1])));
        assert!(
            core.take_batch(false, &mut out).is_none(),
            "its buffered batch went with it"
        );
        assert!(core.is_assigned(&a) && !core.is_assigned(&b));
        assert_eq!(core.buffered(), 0);
    }
}
