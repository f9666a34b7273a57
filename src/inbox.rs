//! A writer thread's queue that wakes its writer only when it must.
//!
//! A queue that wakes its consumer on every message it sends to an idle one makes the sender pay
//! a futex wake (a system call, and on a machine with fewer cores than threads a context
//! switch) for most events: a writer applies an event faster than a router hands it one, so it
//! is idle again by the next: on the trace replay, nearly three times the context switches of
//! these queues (paper §6.9).
//!
//! Here a writer that runs out of messages first *naps*: it waits with a timeout of [`NAP`], up
//! to [`NAPS`] times, and a sender does not wake a napping writer for an ordinary message unless
//! [`WAKE_AT`] messages are queued: the writer finds them when its nap ends, all at once. Only
//! after [`NAPS`] empty naps (a tenth of a millisecond or so with nothing to do) does it fall *asleep*, and a
//! sender wakes a sleeping writer at once. So an idle writer costs nothing, a busy one takes its
//! messages a batch at a time under one lock, and a message waits at most a nap (plus the
//! timer's slack) before its writer takes it. *Urgent* messages (a flush) always wake it.
//!
//! The queue is bounded: a sender waits while `capacity` messages are queued (the writer is
//! always awake then: the message that filled the queue woke it, since `WAKE_AT <= capacity`).
//!
//! What a message owned goes back to the senders to be freed ([`Inbox::give_back`]): the
//! sending thread allocated it, and with glibc's allocator a free from another thread takes the
//! allocating arena's lock, which the sender takes for its every allocation. Writers that freed
//! the events they applied made those locks the replay's largest source of system calls. A
//! sender frees what was given back when it next sends; [`Inbox::reclaim`] frees it at once.

use crate::sync::{Condvar, Mutex, MutexGuard, lock};
use core::time::Duration;

/// What an inbox queues messages in: a `Vec` of them, or a batch that also holds what they
/// point into (the writer pool's copies keep their blocks in one buffer per batch). A writer
/// takes the whole container at once and hands back an empty one, whose room the senders fill
/// next.
pub(crate) trait Messages: Default {
    /// One message.
    type Msg;
    /// Messages queued.
    fn len(&self) -> usize;
    /// No message queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Queues `msg` last.
    fn push(&mut self, msg: Self::Msg);
}

impl<T> Messages for Vec<T> {
    type Msg = T;

    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn push(&mut self, msg: T) {
        Vec::push(self, msg);
    }
}

/// How long a writer with nothing to do waits before it looks again.
pub(crate) const NAP: Duration = Duration::from_micros(50);
/// Empty naps before a writer falls asleep until a sender wakes it. Few: a nap that ends by
/// itself can preempt a query on the writer's core, where a sender's wake comes between the
/// sender's own queries (paper §6.9 measured 40 naps against 2).
pub(crate) const NAPS: u32 = 2;
/// Messages queued for a napping writer before a sender wakes it early.
pub(crate) const WAKE_AT: usize = 32;

/// What the writer is doing, as its senders see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    /// Applying messages, or woken to: it looks at the queue before it waits again.
    Busy,
    /// Waiting with a timeout: it looks at the queue within a nap.
    Napping,
    /// Waiting for a sender's wake.
    Asleep,
}

#[derive(Debug)]
struct State<Q, S> {
    queued: Q,
    /// What the writer is done with, for a sender to free.
    spent: Vec<S>,
    /// Room for `spent`, emptied by a sender.
    spare: Vec<S>,
    writer: Writer,
    /// No more messages will come: the writer takes what is queued and returns.
    closed: bool,
    /// The writer is gone: sends fail and hand their message back.
    stopped: bool,
}

/// Why a message was not queued; it is handed back.
#[derive(Debug)]
pub(crate) enum Refused<T> {
    /// The queue is full ([`Inbox::try_send`] only).
    Full(T),
    /// The writer has stopped.
    Stopped(T),
}

/// One writer's queue of messages, kept in a `Q`, and of what they owned, `S`, on its way back
/// to the senders; see the module docs.
#[derive(Debug)]
pub(crate) struct Inbox<Q, S = ()> {
    state: Mutex<State<Q, S>>,
    /// The writer waits here for messages.
    ready: Condvar,
    /// Senders wait here for room.
    room: Condvar,
    capacity: usize,
    /// Wakes a napping writer at this many queued messages (at most `capacity`).
    wake_at: usize,
    /// Empty naps before the writer sleeps.
    naps: u32,
}

impl<Q: Messages, S> Inbox<Q, S> {
    /// A queue of room for `capacity` messages (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self::with_naps(capacity, NAPS)
    }

    /// As [`Inbox::new`], with the writer sleeping after `naps` empty naps.
    pub(crate) fn with_naps(capacity: usize, naps: u32) -> Self {
        let capacity = capacity.max(1);
        Self {
            state: Mutex::new(State {
                queued: Q::default(),
                spent: Vec::new(),
                spare: Vec::new(),
                writer: Writer::Busy,
                closed: false,
                stopped: false,
            }),
            ready: Condvar::new(),
            room: Condvar::new(),
            capacity,
            wake_at: WAKE_AT.min(capacity),
            naps,
        }
    }

    /// Queues `msg`, waiting while the queue is full; an `urgent` message wakes the writer.
    pub(crate) fn send(&self, msg: Q::Msg, urgent: bool) -> Result<(), Refused<Q::Msg>> {
        let mut state = lock(&self.state);
        while !state.stopped && state.queued.len() >= self.capacity {
            state = wait(&self.room, state);
        }
        self.push(state, urgent, msg, |queued, msg| queued.push(msg))
    }

    /// Queues what `write` adds to the queue (one message), waiting while the queue is full.
    /// Refused with `write` unused if the writer has stopped.
    pub(crate) fn send_with<W: FnOnce(&mut Q)>(&self, write: W) -> Result<(), Refused<W>> {
        let mut state = lock(&self.state);
        while !state.stopped && state.queued.len() >= self.capacity {
            state = wait(&self.room, state);
        }
        self.push(state, false, write, |queued, write| write(queued))
    }

    /// Queues `msg` if there is room, without waiting.
    pub(crate) fn try_send(&self, msg: Q::Msg) -> Result<(), Refused<Q::Msg>> {
        let state = lock(&self.state);
        if !state.stopped && state.queued.len() >= self.capacity {
            return Err(Refused::Full(msg));
        }
        self.push(state, false, msg, |queued, msg| queued.push(msg))
    }

    /// Queues `msg` with `queue` unless the writer has stopped, wakes the writer if it must, and
    /// frees what the writer gave back.
    fn push<M>(
        &self,
        mut state: MutexGuard<'_, State<Q, S>>,
        urgent: bool,
        msg: M,
        queue: impl FnOnce(&mut Q, M),
    ) -> Result<(), Refused<M>> {
        if state.stopped {
            return Err(Refused::Stopped(msg));
        }
        queue(&mut state.queued, msg);
        let spent = Self::spent(&mut state);
        let wake = match state.writer {
            Writer::Busy => false,
            Writer::Napping => urgent || state.queued.len() >= self.wake_at,
            Writer::Asleep => true,
        };
        if wake {
            // Busy until it looks: later senders need not wake it again.
            state.writer = Writer::Busy;
        }
        drop(state);
        if wake {
            self.ready.notify_one();
        }
        if let Some(spent) = spent {
            self.free(spent);
        }
        Ok(())
    }

    /// What the writer gave back, for the caller to [`free`](Self::free) once it let go of the
    /// lock; the spare room takes its place.
    fn spent(state: &mut State<Q, S>) -> Option<Vec<S>> {
        match state.spent.is_empty() {
            true => None,
            false => Some(std::mem::replace(
                &mut state.spent,
                std::mem::take(&mut state.spare),
            )),
        }
    }

    /// Frees what `spent` holds, on this thread, and keeps its room as the spare, which the
    /// writer gets back with its next give-back: the list's own allocation goes round between
    /// the writer and the senders, instead of the writer allocating a list each batch for a
    /// sender to free under the writer's arena lock. (Not measured apart from the give-back.)
    fn free(&self, mut spent: Vec<S>) {
        spent.clear();
        let mut state = lock(&self.state);
        if state.spare.capacity() < spent.capacity() {
            std::mem::swap(&mut state.spare, &mut spent);
        }
        drop(state);
    }

    /// The writer's side: hands what it is done with back for the senders to free, leaving
    /// `spent` empty.
    pub(crate) fn give_back(&self, spent: &mut Vec<S>) {
        if !spent.is_empty() {
            Self::put_spent(&mut lock(&self.state), spent);
        }
    }

    fn put_spent(state: &mut State<Q, S>, spent: &mut Vec<S>) {
        match state.spent.is_empty() {
            true => std::mem::swap(&mut state.spent, spent),
            false => state.spent.append(spent),
        }
    }

    /// Frees, on the calling thread, what the writer gave back, and the room kept for it.
    pub(crate) fn reclaim(&self) {
        let mut state = lock(&self.state);
        let (spent, spare) = (
            std::mem::take(&mut state.spent),
            std::mem::take(&mut state.spare),
        );
        drop(state);
        drop((spent, spare));
    }

    /// The writer's side: frees the room of an empty queue, kept since the last burst of
    /// messages. (Between bursts a queue keeps the room its largest burst took.)
    pub(crate) fn trim(&self) {
        let mut state = lock(&self.state);
        let queued = match state.queued.is_empty() {
            true => std::mem::take(&mut state.queued),
            false => Q::default(),
        };
        drop(state);
        drop(queued);
    }

    /// The writer's side: gives back `spent` (see [`give_back`](Self::give_back)), waits for
    /// messages and moves them all into `batch` (empty), oldest first. Returns `false`, with
    /// nothing taken, once the queue is closed and empty.
    pub(crate) fn take(&self, batch: &mut Q, spent: &mut Vec<S>) -> bool {
        debug_assert!(batch.is_empty());
        let mut state = lock(&self.state);
        if !spent.is_empty() {
            Self::put_spent(&mut state, spent);
        }
        let mut naps = 0;
        loop {
            if !state.queued.is_empty() {
                let was_full = state.queued.len() >= self.capacity;
                std::mem::swap(&mut state.queued, batch);
                state.writer = Writer::Busy;
                drop(state);
                if was_full {
                    self.room.notify_all();
                }
                return true;
            }
            if state.closed {
                return false;
            }
            if naps < self.naps {
                naps += 1;
                state.writer = Writer::Napping;
                state = match self.ready.wait_timeout(state, NAP) {
                    Ok((state, _)) => state,
                    Err(poisoned) => poisoned.into_inner().0,
                };
            } else {
                state.writer = Writer::Asleep;
                state = wait(&self.ready, state);
            }
        }
    }

    /// No more messages: the writer takes what is queued, then [`take`](Self::take) returns
    /// `false`.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.ready.notify_one();
    }

    /// The writer is gone: later sends fail, and senders waiting for room get their message
    /// back. Returns what was queued and will never be taken.
    pub(crate) fn stop(&self) -> Q {
        let mut state = lock(&self.state);
        state.stopped = true;
        let left = std::mem::take(&mut state.queued);
        drop(state);
        self.room.notify_all();
        left
    }
}

/// Waits on `condvar`, ignoring poisoning (see [`lock`]).
fn wait<'a, G>(condvar: &Condvar, guard: MutexGuard<'a, G>) -> MutexGuard<'a, G> {
    match condvar.wait(guard) {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc; // sync-shim: these tests run real threads, never under loom
    use std::time::Instant;

    /// Takes batches on a thread of its own until the inbox closes; returns them in order.
    fn drain(inbox: Arc<Inbox<Vec<u32>>>) -> std::thread::JoinHandle<Vec<u32>> {
        std::thread::spawn(move || {
            let (mut all, mut batch) = (Vec::new(), Vec::new());
            while inbox.take(&mut batch, &mut Vec::new()) {
                all.append(&mut batch);
            }
            all
        })
    }

    #[test]
    fn every_message_arrives_in_order_through_a_small_queue() {
        let inbox = Arc::new(Inbox::new(3));
        let writer = drain(inbox.clone());
        for i in 0..10_000 {
            inbox.send(i, i % 1000 == 0).unwrap();
        }
        inbox.close();
        assert_eq!(writer.join().unwrap(), (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_napping_writer_takes_an_ordinary_message_within_its_nap() {
        let inbox = Arc::new(Inbox::<Vec<u32>>::new(8));
        let (tx, rx) = std::sync::mpsc::channel(); // sync-shim: a real thread's report
        let writer = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                let mut batch = Vec::new();
                while inbox.take(&mut batch, &mut Vec::new()) {
                    for _ in batch.drain(..) {
                        tx.send(Instant::now()).unwrap();
                    }
                }
            })
        };
        // Sleeping or napping, the writer takes the message without an urgent wake: a nap
        // ends by itself, and a sleeping writer is woken.
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            inbox.send(1, false).unwrap();
            rx.recv_timeout(Duration::from_secs(10))
                .expect("the writer took the message");
        }
        inbox.close();
        writer.join().unwrap();
    }

    #[test]
    fn a_full_queue_refuses_try_send_and_a_stopped_writer_refuses_all() {
        let inbox = Inbox::<Vec<u32>>::new(2);
        inbox.send(1, false).unwrap();
        inbox.try_send(2).unwrap();
        assert!(matches!(inbox.try_send(3), Err(Refused::Full(3))));
        assert_eq!(inbox.stop(), vec![1, 2]);
        assert!(matches!(inbox.send(4, false), Err(Refused::Stopped(4))));
        assert!(matches!(inbox.try_send(5), Err(Refused::Stopped(5))));
    }

    #[test]
    fn a_sender_waiting_for_room_gets_its_message_back_when_the_writer_stops() {
        let inbox = Arc::new(Inbox::<Vec<u32>>::new(1));
        inbox.send(1, false).unwrap();
        let sender = {
            let inbox = inbox.clone();
            std::thread::spawn(move || inbox.send(2, false))
        };
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(inbox.stop(), vec![1]);
        assert!(matches!(sender.join().unwrap(), Err(Refused::Stopped(2))));
    }

    /// What a writer gives back is freed by the next send, or by `reclaim`, and each message's
    /// belongings come back exactly once.
    #[test]
    fn spent_messages_come_back_to_the_senders() {
        let inbox = Inbox::<Vec<u32>, Arc<()>>::new(8);
        let owned = Arc::new(());
        let (mut batch, mut spent) = (Vec::new(), Vec::new());
        inbox.send(1, true).unwrap();
        assert!(inbox.take(&mut batch, &mut spent));
        spent.extend(batch.drain(..).map(|_| owned.clone()));
        inbox.give_back(&mut spent);
        assert!(spent.is_empty());
        assert_eq!(Arc::strong_count(&owned), 2, "held until a sender frees it");
        inbox.send(2, false).unwrap();
        assert_eq!(Arc::strong_count(&owned), 1, "freed by the send");
        assert!(inbox.take(&mut batch, &mut spent));
        spent.push(owned.clone());
        inbox.give_back(&mut spent);
        inbox.reclaim();
        assert_eq!(Arc::strong_count(&owned), 1, "freed by reclaim");
    }
}
