//! The lite pull consumer in the simulator: each member runs a [`LiteCore`] (the buffer and
//! positions the `LiteRoot` actor runs) with the group division of `consumer::rebalance`; the
//! simulator executes the core's actions the way the actors do — a pull loop per assigned
//! queue (start offset, admission, pull, delivery), the offset store, persisting released
//! queues — and plays the application, polling at its own pace (sometimes too slowly, so that
//! flow control holds pulls back). What a poll returns is what counts as consumed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::consumer::config::ConsumeFromWhere;
use crate::consumer::lite_core::{Admission, Delivery, LiteAction, LiteCore, SlotId};
use crate::consumer::offset::{start_offset, StartOffset};
use crate::consumer::pull_config::LitePullConsumerConfig;
use crate::error::Error;
use crate::message::MessageQueue;
use crate::protocol::RemotingCommand;
use crate::rpc::{query_offset_command, update_offset_command, PullRequest, Subscription};

use super::{broker_of, keys_text, stored_offset, Event, Life, Pending, World, GROUP, TOPIC};

/// How often the simulated application's auto-commit may store what it polled.
const AUTO_COMMIT_MS: i64 = 2_000;

/// One member's lite pull consumer.
pub(super) struct LiteMember {
    pub(super) core: LiteCore,
    pub(super) config: LitePullConsumerConfig,
    pub(super) loops: BTreeMap<SlotId, LiteLoop>,
    last_commit: i64,
    /// Queues let go whose offsets are being persisted.
    pub(super) releasing: BTreeSet<MessageQueue>,
    /// Per queue, the offset below which every store was checked (start, reposition, store).
    checked_from: BTreeMap<MessageQueue, i64>,
    /// Queues repositioned since their last store (a store below the last is then allowed).
    repositioned: BTreeSet<MessageQueue>,
}

impl LiteMember {
    pub(super) fn new() -> Self {
        let mut config = LitePullConsumerConfig::new(GROUP);
        config.pull_batch_size = 4;
        config.pull_threshold_for_queue = 12;
        config.pull_threshold_for_all = 40;
        config.consume_from_where = ConsumeFromWhere::FirstOffset;
        config.auto_commit = true;
        config.auto_commit_interval = Duration::from_millis(AUTO_COMMIT_MS as u64);
        let subscriptions =
            BTreeMap::from([(TOPIC.to_string(), Arc::new(Subscription::new("*", 1)))]);
        LiteMember {
            core: LiteCore::new(config.clone(), subscriptions),
            config,
            loops: BTreeMap::new(),
            last_commit: 0,
            releasing: BTreeSet::new(),
            checked_from: BTreeMap::new(),
            repositioned: BTreeSet::new(),
        }
    }
}

/// The executor state of one queue's pull loop (the `LiteQueue` actor's fields).
pub(super) struct LiteLoop {
    /// The next pull: queue, offset, broker id (as the actor's).
    request: PullRequest,
    epoch: u64,
    started: bool,
    /// Bumped by every restart or wake: only the newest chain of steps goes on.
    chain: u64,
    /// The chain whose pull is under way.
    pulling: Option<u64>,
    woken: bool,
    pre_admitted: bool,
}

/// What happens to a lite member on its own schedule.
#[derive(Debug)]
pub(super) enum LiteTick {
    /// A step of a queue's pull loop.
    Step(SlotId, u64),
    /// The application polls.
    Poll,
}

impl World {
    fn lite(&mut self, c: usize) -> Option<&mut LiteMember> {
        self.consumers[c].lite.as_mut()
    }

    /// Runs a core call of member `c` and carries out its actions.
    fn lite_step<R>(
        &mut self,
        c: usize,
        call: impl FnOnce(&mut LiteCore, &mut Vec<LiteAction>) -> R,
    ) -> Option<R> {
        let lite = self.lite(c)?;
        let mut out = Vec::new();
        let result = call(&mut lite.core, &mut out);
        for action in out {
            self.lite_execute(c, action);
        }
        Some(result)
    }

    fn lite_schedule(&mut self, c: usize, after_ms: i64, tick: LiteTick) {
        let incarnation = self.consumers[c].incarnation;
        self.schedule(
            after_ms,
            Event::Lite {
                consumer: c,
                incarnation,
                tick,
            },
        );
    }

    fn lite_execute(&mut self, c: usize, action: LiteAction) {
        match action {
            LiteAction::Start { slot, request } => {
                let queue = &request.queue;
                self.note(|| format!("c{c} takes {queue}"));
                self.take_ownership(c, queue);
                let Some(lite) = self.lite(c) else { return };
                lite.loops.insert(
                    slot,
                    LiteLoop {
                        request: *request,
                        epoch: 0,
                        started: false,
                        chain: 0,
                        pulling: None,
                        woken: false,
                        pre_admitted: false,
                    },
                );
                self.lite_schedule(c, 0, LiteTick::Step(slot, 0));
            }
            LiteAction::Stop(slot) => {
                if let Some(lite) = self.lite(c) {
                    lite.loops.remove(&slot);
                }
            }
            LiteAction::Restart {
                slot,
                epoch,
                offset,
                delay,
            } => {
                let Some(lite) = self.lite(c) else { return };
                let Some(pull_loop) = lite.loops.get_mut(&slot) else {
                    return;
                };
                pull_loop.epoch = epoch;
                pull_loop.request.offset = offset;
                pull_loop.started = true;
                pull_loop.pre_admitted = false;
                pull_loop.chain += 1;
                let (queue, chain) = (pull_loop.request.queue.clone(), pull_loop.chain);
                lite.checked_from.insert(queue.clone(), offset);
                lite.repositioned.insert(queue.clone());
                self.note(|| format!("c{c} {queue} restarts at {offset} (epoch {epoch})"));
                self.lite_schedule(c, delay.as_millis() as i64, LiteTick::Step(slot, chain));
            }
            LiteAction::Wake { slot, admitted } => {
                let Some(lite) = self.lite(c) else { return };
                let Some(pull_loop) = lite.loops.get_mut(&slot) else {
                    return;
                };
                if admitted == Some(pull_loop.epoch) {
                    pull_loop.pre_admitted = true;
                }
                if pull_loop.pulling == Some(pull_loop.chain) {
                    pull_loop.woken = true;
                    return;
                }
                pull_loop.chain += 1;
                let chain = pull_loop.chain;
                self.lite_schedule(c, 0, LiteTick::Step(slot, chain));
            }
            LiteAction::Store { queue, offset } => self.lite_store(c, &queue, offset),
            LiteAction::Note(note) => self.note(|| format!("c{c} {note:?}")),
        }
    }

    /// The offset store takes a consumed offset: it must not pass a message this member's
    /// application was not given.
    fn lite_store(&mut self, c: usize, queue: &MessageQueue, offset: i64) {
        let before = self.consumers[c].offsets.read(queue);
        let Some(lite) = self.consumers[c].lite.as_mut() else {
            return;
        };
        let repositioned = lite.repositioned.remove(queue);
        let from = lite.checked_from.insert(queue.clone(), offset);
        self.consumers[c].offsets.update(queue, offset, false);
        if before == Some(offset) {
            return;
        }
        self.note(|| format!("c{c} {queue} stores {offset}"));
        if before.is_some_and(|b| b > offset) && !repositioned {
            self.violations
                .push(super::Violation::OffsetBackwards(format!(
                    "c{c} {queue}: {before:?} -> {offset}"
                )));
        }
        let Some(from) = from else { return };
        let settled = self.settled.get(queue);
        let mark = self.wipe_marks.get(queue).copied().unwrap_or(0);
        let missing =
            (from..offset).find(|o| *o >= mark && !settled.is_some_and(|s| s.contains(o)));
        if let Some(missing) = missing {
            self.violations
                .push(super::Violation::CommitPastUnfinished(format!(
                    "c{c} {queue}: stored {offset} while offset {missing} was never polled"
                )));
        }
    }

    pub(super) fn on_lite_tick(&mut self, c: usize, tick: LiteTick) {
        match tick {
            LiteTick::Step(slot, chain) => self.lite_loop_step(c, slot, chain),
            LiteTick::Poll => self.lite_poll(c),
        }
    }

    /// A step of a queue's pull loop: find the start offset, or ask for admission and pull.
    fn lite_loop_step(&mut self, c: usize, slot: SlotId, chain: u64) {
        if self.consumers[c].life != Life::Running {
            return;
        }
        let Some(lite) = self.lite(c) else { return };
        let Some(pull_loop) = lite.loops.get_mut(&slot) else {
            return;
        };
        if pull_loop.chain != chain {
            return;
        }
        let queue = pull_loop.request.queue.clone();
        let Some(b) = broker_of(&queue) else { return };
        if !pull_loop.started {
            let command = query_offset_command(GROUP, &queue, false);
            pull_loop.pulling = Some(chain);
            self.request(c, b, command, Pending::LiteStart(slot, chain), 3_000);
            return;
        }
        pull_loop.pulling = Some(chain);
        pull_loop.woken = false;
        let admitted = std::mem::take(&mut pull_loop.pre_admitted);
        let (epoch, offset) = (pull_loop.epoch, pull_loop.request.offset);
        let request = pull_loop.request.clone();
        if !admitted {
            match lite.core.admit(slot, epoch, offset) {
                Admission::Go => {}
                Admission::Wait(delay) => {
                    self.lite_step_ended(c, slot, chain, Some(delay.as_millis() as i64));
                    return;
                }
                Admission::Stale => {
                    self.lite_step_ended(c, slot, chain, None);
                    return;
                }
            }
        }
        let timeout = request.timeout.as_millis() as i64;
        let command = request.to_command();
        self.request(
            c,
            b,
            command,
            Pending::LitePull(slot, chain, epoch, Box::new(request)),
            timeout,
        );
    }

    /// A step ended without a pull: step again after `again` ms (`None`: wait for a restart).
    fn lite_step_ended(&mut self, c: usize, slot: SlotId, chain: u64, again: Option<i64>) {
        let Some(lite) = self.lite(c) else { return };
        let Some(pull_loop) = lite.loops.get_mut(&slot) else {
            return;
        };
        if pull_loop.pulling == Some(chain) {
            pull_loop.pulling = None;
        }
        if pull_loop.chain != chain {
            return;
        }
        let Some(delay) = again else { return };
        let delay = if std::mem::take(&mut pull_loop.woken) {
            0
        } else {
            delay
        };
        self.lite_schedule(c, delay, LiteTick::Step(slot, chain));
    }

    /// Answers to a lite member's requests.
    pub(super) fn on_lite_answer(
        &mut self,
        c: usize,
        pending: Pending,
        answer: Result<RemotingCommand, Error>,
    ) {
        match pending {
            Pending::LiteStart(slot, chain) => {
                let stored = stored_offset(&answer);
                let found = match start_offset(ConsumeFromWhere::FirstOffset, stored, TOPIC, 0) {
                    StartOffset::Use(offset) => Some(offset),
                    _ => None,
                };
                let Some(lite) = self.lite(c) else { return };
                let Some(pull_loop) = lite.loops.get_mut(&slot) else {
                    return;
                };
                if pull_loop.pulling == Some(chain) {
                    pull_loop.pulling = None;
                }
                match found {
                    // A restart (reset) that came meanwhile wins.
                    Some(offset) if chain == pull_loop.chain && !pull_loop.started => {
                        pull_loop.request.offset = offset;
                        pull_loop.started = true;
                        let queue = pull_loop.request.queue.clone();
                        lite.checked_from.entry(queue.clone()).or_insert(offset);
                        lite.core.on_started(slot, offset);
                        self.note(|| format!("c{c} {queue} starts at {offset}"));
                        self.lite_schedule(c, 0, LiteTick::Step(slot, chain));
                    }
                    _ if chain != pull_loop.chain => {}
                    Some(_) => self.lite_schedule(c, 0, LiteTick::Step(slot, chain)),
                    None => self.lite_schedule(c, 1_000, LiteTick::Step(slot, chain)),
                }
            }
            Pending::LitePull(slot, chain, epoch, request) => {
                let peer = request.queue.broker_name.clone();
                let raw = answer.and_then(|r| request.read_raw_response(&peer, r));
                let error_delay = self.lite(c).map_or(1_000, |l| {
                    l.config.pull_delay_on_exception.as_millis() as i64
                });
                let raw = match raw {
                    Ok(raw) => raw,
                    Err(e) => {
                        self.note(|| format!("c{c} {} lite pull failed: {e}", request.queue));
                        self.lite_step_ended(c, slot, chain, Some(error_delay));
                        return;
                    }
                };
                let (next, broker_id) = (raw.next_begin_offset, raw.suggest_broker_id);
                let delivery = Delivery {
                    slot,
                    epoch,
                    status: raw.status,
                    from_offset: request.offset,
                    next_offset: next,
                    body: raw.body,
                    offset_delta: raw.offset_delta,
                };
                let admission = self.lite_step(c, |core, out| core.on_delivery(delivery, out));
                self.check_lite_flow_control(c);
                let Some(lite) = self.lite(c) else { return };
                let Some(pull_loop) = lite.loops.get_mut(&slot) else {
                    return;
                };
                if pull_loop.epoch == epoch {
                    pull_loop.request.offset = next;
                    pull_loop.request.broker_id = broker_id;
                    pull_loop.pre_admitted =
                        admission == Some(Admission::Go) && chain == pull_loop.chain;
                }
                if pull_loop.pulling == Some(chain) {
                    pull_loop.pulling = None;
                }
                if pull_loop.chain == chain {
                    pull_loop.woken = false;
                    self.lite_schedule(c, 0, LiteTick::Step(slot, chain));
                }
            }
            Pending::Release(queue) => {
                // Persisted (or given up): the queue is free for its next owner.
                let committed = self.consumers[c].offsets.remove(&queue);
                if let Some(lite) = self.consumers[c].lite.as_mut() {
                    lite.releasing.remove(&queue);
                    lite.checked_from.remove(&queue);
                }
                if let Some(member) = self.consumers[c].schedule.as_mut() {
                    member.releasing.remove(&queue);
                }
                self.releases
                    .entry(queue.clone())
                    .or_default()
                    .push((self.now, committed.unwrap_or(i64::MAX)));
                if let Some(owners) = self.owners.get_mut(&queue) {
                    owners.remove(&c);
                }
                self.note(|| format!("c{c} released {queue}"));
                if self.consumers[c].life == Life::ShuttingDown {
                    self.maybe_unregister(c);
                }
            }
            _ => {}
        }
    }

    /// The application polls: with auto-commit, first stores what earlier polls returned once
    /// the interval has passed; then takes the next batch, if any.
    fn lite_poll(&mut self, c: usize) {
        if self.consumers[c].life != Life::Running {
            return;
        }
        let now = self.now;
        let Some(lite) = self.lite(c) else { return };
        if now - lite.last_commit >= AUTO_COMMIT_MS {
            lite.last_commit = now;
            self.lite_step(c, |core, out| core.commit_consumed(out));
        }
        let taken = self
            .lite_step(c, |core, out| core.take_batch(false, out))
            .flatten();
        if let Some(taken) = taken {
            let queue = taken
                .messages
                .first()
                .map(|m| MessageQueue::new(TOPIC, &*m.broker_name, m.queue_id));
            if let Some(queue) = queue {
                self.note(|| format!("c{c} {queue} polled {:?}", keys_text(&taken.messages)));
                self.record_consumed(&queue, &taken.messages);
            }
        }
        // Mostly quick polls; now and then the application is busy for seconds, so that
        // the buffer fills and flow control holds pulls back.
        let next = if self.rng.chance(30) {
            self.rng.range(2_000..8_000)
        } else {
            self.rng.range(5..300)
        };
        self.lite_schedule(c, next, LiteTick::Poll);
    }

    /// A rebalance pass ended: stores what was polled from queues about to go, applies the
    /// division, and persists then releases the queues that went away (the `Member` actor).
    pub(super) fn lite_apply(&mut self, c: usize, target: &BTreeSet<MessageQueue>) {
        let queues: Vec<MessageQueue> = target
            .iter()
            .filter(|q| q.topic == TOPIC)
            .cloned()
            .collect();
        self.lite_step(c, |core, out| core.commit_consumed(out));
        let gone = self
            .lite_step(c, |core, out| {
                core.set_assignment(&queues, Some(TOPIC), out)
            })
            .unwrap_or_default();
        for queue in gone {
            self.note(|| format!("c{c} drops {queue}"));
            if let Some(lite) = self.lite(c) {
                lite.releasing.insert(queue.clone());
            }
            self.release(c, queue);
        }
    }

    /// Persists the queue's offset, then lets it go (the `Member` actor's `PersistAndRemove`).
    pub(super) fn release(&mut self, c: usize, queue: MessageQueue) {
        let offset = self.consumers[c].offsets.read(&queue);
        if let (Some(offset), Some(b)) = (offset, broker_of(&queue)) {
            // Unreachable, `request` answers the release itself (failed).
            let command = update_offset_command(GROUP, &queue, offset);
            self.request(c, b, command, Pending::Release(queue), 3_000);
            return;
        }
        self.on_lite_answer(
            c,
            Pending::Release(queue),
            Err(Error::Shutdown("nothing to persist".into())),
        );
    }

    /// Clean shutdown: store what was polled, stop every queue, persist and release them.
    pub(super) fn lite_shutdown(&mut self, c: usize) {
        self.lite_step(c, |core, out| core.commit_consumed(out));
        let queues = self
            .lite(c)
            .map(|l| l.core.assignment())
            .unwrap_or_default();
        self.lite_step(c, |core, out| core.shutdown(out));
        for queue in queues {
            if let Some(lite) = self.lite(c) {
                lite.releasing.insert(queue.clone());
            }
            self.release(c, queue);
        }
    }

    /// The queues a lite member pulls, with the offset its loop reads from and the one it
    /// stored (for wipe marks).
    pub(super) fn lite_positions(&self, c: usize) -> Vec<(MessageQueue, i64)> {
        let Some(lite) = self.consumers[c].lite.as_ref() else {
            return Vec::new();
        };
        lite.loops
            .values()
            .map(|l| {
                let queue = &l.request.queue;
                let stored = self.consumers[c].offsets.read(queue).unwrap_or(0);
                (queue.clone(), l.request.offset.max(stored))
            })
            .collect()
    }

    fn check_lite_flow_control(&mut self, c: usize) {
        let Some(lite) = self.consumers[c].lite.as_ref() else {
            return;
        };
        // A pull is admitted below the limit and may bring a whole batch.
        let batch = u64::from(lite.config.pull_batch_size);
        let limit = u64::from(lite.config.pull_threshold_for_queue) + batch;
        let mut found = Vec::new();
        for (queue, cached) in lite.core.cached() {
            if cached > limit {
                found.push(format!("c{c} {queue}: {cached} cached, limit {limit}"));
            }
        }
        let all_limit =
            u64::from(lite.config.pull_threshold_for_all) + batch * lite.loops.len() as u64;
        let buffered = lite.core.buffered();
        if buffered > all_limit {
            found.push(format!("c{c}: {buffered} buffered, limit {all_limit}"));
        }
        self.violations
            .extend(found.into_iter().map(super::Violation::FlowControl));
    }
}
