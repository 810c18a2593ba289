//! The pull schedule service in the simulator: each member divides the topic with
//! `consumer::rebalance::topic_share` (as the `Member` actor does), turns a division into task
//! changes with `consumer::rebalance::plan_changes` (as the `ScheduleService` actor does), and
//! runs one pull task per owned queue the way the Java sample and this crate's example do: read
//! the offset (the member's store, else the broker's), pull, handle what came, store the next
//! offset, run again. A revoked queue's task stops after its running call; only then is its
//! offset persisted and the queue released — the order the actors keep.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::consumer::offset::StoredOffset;
use crate::consumer::rebalance::plan_changes;
use crate::error::Error;
use crate::message::MessageQueue;
use crate::protocol::RemotingCommand;
use crate::rpc::{query_offset_command, PullRequest, PullStatus, Subscription};

use super::{broker_of, keys_text, stored_offset, Event, Life, Pending, World, GROUP, TOPIC};

/// The delay between runs when a pull found nothing (the example's default).
const IDLE_DELAY_MS: i64 = 200;
/// The delay after a failed run.
const ERROR_DELAY_MS: i64 = 1_000;

/// One member's schedule service.
#[derive(Default)]
pub(super) struct ScheduleMember {
    pub(super) tasks: BTreeMap<MessageQueue, PullTaskSim>,
    /// Queues whose task stopped, their offsets being persisted.
    pub(super) releasing: BTreeSet<MessageQueue>,
    next_instance: u64,
}

/// One queue's pull task.
pub(super) struct PullTaskSim {
    instance: u64,
    /// A run is under way (the actor runs it inside `ctx.wait`: a stop waits for it).
    running: bool,
    /// Revoked (or shutting down): stop after the running call.
    pub(super) stopping: bool,
}

impl World {
    fn schedule_member(&mut self, c: usize) -> Option<&mut ScheduleMember> {
        self.consumers[c].schedule.as_mut()
    }

    fn schedule_run_after(&mut self, c: usize, queue: &MessageQueue, instance: u64, ms: i64) {
        let incarnation = self.consumers[c].incarnation;
        self.schedule(
            ms,
            Event::ScheduleRun {
                consumer: c,
                incarnation,
                queue: queue.clone(),
                instance,
            },
        );
    }

    /// A rebalance pass ended: stop the tasks of queues lost, start tasks for queues gained.
    pub(super) fn schedule_apply(&mut self, c: usize, target: &BTreeSet<MessageQueue>) {
        let Some(member) = self.schedule_member(c) else {
            return;
        };
        let owned: Vec<MessageQueue> = member
            .tasks
            .iter()
            .filter(|(_, t)| !t.stopping)
            .map(|(q, _)| q.clone())
            .collect();
        let seen = BTreeSet::from([TOPIC.to_string()]);
        let target: BTreeSet<MessageQueue> = target
            .iter()
            .filter(|q| q.topic == TOPIC)
            .cloned()
            .collect();
        let changes = plan_changes(&owned, &target, &seen, &[]);
        for queue in changes.drop {
            self.note(|| format!("c{c} drops {queue}"));
            self.schedule_stop(c, &queue);
        }
        for queue in changes.start {
            let Some(member) = self.schedule_member(c) else {
                return;
            };
            if member.tasks.contains_key(&queue) || member.releasing.contains(&queue) {
                // Still stopping from an earlier pass: the next pass starts it again.
                continue;
            }
            member.next_instance += 1;
            let instance = member.next_instance;
            member.tasks.insert(
                queue.clone(),
                PullTaskSim {
                    instance,
                    running: false,
                    stopping: false,
                },
            );
            self.note(|| format!("c{c} takes {queue}"));
            self.take_ownership(c, &queue);
            self.schedule_run_after(c, &queue, instance, 0);
        }
    }

    /// Stops a queue's task: now if no run is under way, else when it ends.
    fn schedule_stop(&mut self, c: usize, queue: &MessageQueue) {
        let Some(member) = self.schedule_member(c) else {
            return;
        };
        let Some(task) = member.tasks.get_mut(queue) else {
            return;
        };
        task.stopping = true;
        if !task.running {
            self.schedule_task_stopped(c, queue);
        }
    }

    /// The task is gone: persist the queue's offset, then release it.
    fn schedule_task_stopped(&mut self, c: usize, queue: &MessageQueue) {
        let Some(member) = self.schedule_member(c) else {
            return;
        };
        member.tasks.remove(queue);
        member.releasing.insert(queue.clone());
        self.release(c, queue.clone());
    }

    /// Clean shutdown: every task stops after its running call, then its queue is released.
    pub(super) fn schedule_shutdown(&mut self, c: usize) {
        let queues: Vec<MessageQueue> = self
            .schedule_member(c)
            .map(|m| m.tasks.keys().cloned().collect())
            .unwrap_or_default();
        for queue in queues {
            self.schedule_stop(c, &queue);
        }
    }

    /// A run of the queue's task: find the offset, then pull.
    pub(super) fn schedule_run(&mut self, c: usize, queue: MessageQueue, instance: u64) {
        let life = self.consumers[c].life;
        let stored = self.consumers[c].offsets.read(&queue);
        let Some(member) = self.schedule_member(c) else {
            return;
        };
        let Some(task) = member.tasks.get_mut(&queue) else {
            return;
        };
        if task.instance != instance || task.running {
            return;
        }
        if task.stopping || life != Life::Running {
            self.schedule_task_stopped(c, &queue);
            return;
        }
        task.running = true;
        match stored {
            Some(offset) => self.schedule_pull(c, queue, instance, offset),
            None => {
                let Some(b) = broker_of(&queue) else { return };
                let command = query_offset_command(GROUP, &queue, false);
                self.request(
                    c,
                    b,
                    command,
                    Pending::ScheduleOffset(queue, instance),
                    3_000,
                );
            }
        }
    }

    fn schedule_pull(&mut self, c: usize, queue: MessageQueue, instance: u64, offset: i64) {
        let Some(b) = broker_of(&queue) else { return };
        let mut request = PullRequest::new(GROUP, queue.clone(), offset)
            .subscription(Arc::new(Subscription::new("*", 1)))
            .max_messages(4);
        request.suspend = None;
        request.timeout = Duration::from_secs(3);
        let command = request.to_command();
        self.request(
            c,
            b,
            command,
            Pending::SchedulePull(queue, instance, Box::new(request)),
            3_000,
        );
    }

    /// A run ended: the next one after `delay_ms`, or the task stops if it was revoked.
    fn schedule_run_ended(&mut self, c: usize, queue: &MessageQueue, instance: u64, delay_ms: i64) {
        let Some(member) = self.schedule_member(c) else {
            return;
        };
        let Some(task) = member.tasks.get_mut(queue) else {
            return;
        };
        if task.instance != instance {
            return;
        }
        task.running = false;
        if task.stopping {
            self.schedule_task_stopped(c, queue);
        } else {
            self.schedule_run_after(c, queue, instance, delay_ms);
        }
    }

    /// Answers to a schedule member's requests.
    pub(super) fn on_schedule_answer(
        &mut self,
        c: usize,
        pending: Pending,
        answer: Result<RemotingCommand, Error>,
    ) {
        match pending {
            Pending::ScheduleOffset(queue, instance) => {
                let stored = stored_offset(&answer);
                match stored {
                    StoredOffset::Found(offset) if offset >= 0 => {
                        self.schedule_pull(c, queue, instance, offset)
                    }
                    // None stored: the first message on (the example reads from 0).
                    StoredOffset::Found(_) | StoredOffset::NotFound => {
                        self.schedule_pull(c, queue, instance, 0)
                    }
                    StoredOffset::Unavailable => {
                        self.schedule_run_ended(c, &queue, instance, ERROR_DELAY_MS)
                    }
                }
            }
            Pending::SchedulePull(queue, instance, request) => {
                let peer = queue.broker_name.clone();
                let result = answer.and_then(|r| request.read_response(&peer, r));
                // The callback runs to its end whatever happened meanwhile: it handles what
                // came and stores the next offset (a stop waits for it).
                let result = match result {
                    Ok(result) => result,
                    Err(e) => {
                        self.note(|| format!("c{c} {queue} task pull failed: {e}"));
                        self.schedule_run_ended(c, &queue, instance, ERROR_DELAY_MS);
                        return;
                    }
                };
                if !result.messages.is_empty() {
                    self.note(|| {
                        let keys = keys_text(&result.messages);
                        format!("c{c} {queue} task handled {keys:?}")
                    });
                }
                self.record_consumed(&queue, &result.messages);
                // The callback moves the offset on after handling what came.
                self.consumers[c]
                    .offsets
                    .update(&queue, result.next_begin_offset, false);
                let delay = if result.status == PullStatus::Found {
                    0
                } else {
                    IDLE_DELAY_MS
                };
                self.schedule_run_ended(c, &queue, instance, delay);
            }
            _ => {}
        }
    }

    /// The queues a schedule member owns and the offset it stored (for wipe marks).
    pub(super) fn schedule_positions(&self, c: usize) -> Vec<(MessageQueue, i64)> {
        let Some(member) = self.consumers[c].schedule.as_ref() else {
            return Vec::new();
        };
        member
            .tasks
            .keys()
            .map(|q| (q.clone(), self.consumers[c].offsets.read(q).unwrap_or(0)))
            .collect()
    }
}
