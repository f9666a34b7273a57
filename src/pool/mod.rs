//! The writer pool: events applied by a few OS threads, queries inline on the caller's thread.
//!
//! Routing is sticky: every event of a worker id (all its dp ranks) goes to the same thread, so
//! one worker's events apply in submission order and writers never contend on a worker's lock.
//!
//! Events are copied into the pool's own buffers, which the writers apply in place: from an
//! owned event ([`WriterPool::submit`], which frees it on the caller's thread) or from a
//! router's own buffer ([`WriterPool::submit_copy`], for a router that keeps or reuses its event
//! buffers: no allocation per event).
//!
//! ```
//! use std::sync::Arc;
//! use flash_indexer::{Block, DefaultIndexer, Event, LocalHash, SeqHash, Worker};
//! use flash_indexer::pool::{PoolConfig, WriterPool};
//!
//! let pool = WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default());
//! let w = Worker::new(4, 0);
//! pool.submit(Event::stored(w, 0, None, vec![Block::new(LocalHash(1), SeqHash(11))])).unwrap();
//! pool.flush(); // returns once every event submitted before it is applied
//! assert_eq!(pool.find_matches(&[LocalHash(1)]).get(w), Some(1));
//! assert_eq!(pool.stats().applied, 1);
//! ```

mod batch;

use crate::error::EventError;
use crate::inbox::{Inbox, Refused};
use crate::index::KvIndex;
use crate::latch::Latch;
use crate::scores::OverlapScores;
use crate::sync::Arc;
use crate::sync::atomic::Ordering;
use crate::types::{Event, EventView, LocalHash, Worker};
use batch::{Batch, Copied};
use core::fmt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a [`WriterPool`] is set up.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Writer threads (at least one).
    pub threads: usize,
    /// Events each thread's queue holds before [`WriterPool::submit`] waits for room. A copied
    /// event counts once more for every 16 blocks it carries, so a full queue's copies hold at
    /// most 16 blocks per unit of capacity.
    pub queue_capacity: usize,
}

impl Default for PoolConfig {
    /// Two threads (the machines this crate is measured on have two cores), 4096 events each.
    fn default() -> Self {
        Self {
            threads: 2,
            queue_capacity: 4096,
        }
    }
}

/// Why an event was not queued. The event is handed back: nothing is lost.
#[derive(Debug)]
#[non_exhaustive]
pub enum SubmitError {
    /// The worker's queue is full ([`WriterPool::try_submit`] only).
    Full(Event),
    /// The writer thread is gone (it can only stop if applying an event panicked).
    Closed(Event),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(e) => write!(f, "the writer queue of {} is full", e.worker),
            Self::Closed(e) => write!(f, "the writer thread of {} has stopped", e.worker),
        }
    }
}

impl std::error::Error for SubmitError {}

crate::counters::counters! {
    /// Counters of a [`WriterPool`], read with [`WriterPool::stats`].
    PoolStats, Counters {
        /// Events applied without error.
        applied,
        /// `Removed` events applied with an [`EventError::UnknownBlocks`] warning.
        warned_unknown_blocks,
        /// Events rejected with [`EventError::UnknownParent`] (nothing changed).
        rejected_unknown_parent,
        /// Events rejected with [`EventError::InvalidSequence`].
        rejected_invalid_sequence,
        /// Events rejected with [`EventError::Conflict`].
        rejected_conflict,
    }
}

impl PoolStats {
    /// Every event rejected (nothing changed).
    pub fn rejected(&self) -> u64 {
        self.rejected_unknown_parent + self.rejected_invalid_sequence + self.rejected_conflict
    }
}

impl Counters {
    fn count(&self, result: &Result<(), EventError>) {
        let counter = match result {
            Ok(()) => &self.applied,
            Err(EventError::UnknownBlocks { .. }) => &self.warned_unknown_blocks,
            Err(EventError::UnknownParent { .. }) => &self.rejected_unknown_parent,
            // No `KvIndex` of this crate returns `UnknownGroup` (only a hybrid index does): an
            // index outside it that does has refused a malformed event.
            Err(EventError::InvalidSequence { .. } | EventError::UnknownGroup { .. }) => {
                &self.rejected_invalid_sequence
            }
            Err(EventError::Conflict { .. }) => &self.rejected_conflict,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

enum Msg {
    Event(Event),
    /// An event of [`WriterPool::submit_copy`], its blocks in the batch's buffers.
    Copied(Copied),
    RemoveWorker(u64),
    RemoveWorkerDpRank(Worker),
    Flush(Countdown),
}

/// A flush's share of its latch: counted down when dropped, so a flush returns even when a
/// writer that stopped drops it unapplied.
struct Countdown(Arc<Latch>);

impl Drop for Countdown {
    fn drop(&mut self) {
        self.0.count_down();
    }
}

/// A pool of writer threads in front of any [`KvIndex`]. See the [module docs](self).
///
/// Queues are bounded. [`submit`](Self::submit) waits while the worker's queue is full (back
/// pressure: the wait lasts until its writer takes the queued events);
/// [`try_submit`](Self::try_submit) never waits and hands the event back instead.
///
/// A writer that runs out of events naps for a few tens of microseconds at a time before it
/// sleeps, and a submitter wakes a napping writer only once a few dozen events are queued for it,
/// so that most submits cost no system call: an event may wait up to a nap (plus the timer's
/// slack) before it is applied. [`flush`](Self::flush) wakes every writer at once.
///
/// The pool keeps no state per worker and does not interpret event ids: every event is applied,
/// in submission order per worker id. Ids far ahead or behind mean nothing here; sequence
/// numbers are checked in one place, by whoever knows what they number (the
/// [`ingest`](crate::ingest) subscriber checks the engine's, repairs gaps and resynchronizes).
/// So a million workers that come and go leave nothing behind in the pool, and no wild id can
/// make it drop later events.
///
/// Dropping the pool applies every queued event, then joins the threads.
pub struct WriterPool<I: KvIndex + ?Sized + 'static> {
    index: Arc<I>,
    queues: Vec<Arc<Inbox<Batch, Event>>>,
    threads: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl<I: KvIndex + ?Sized + 'static> WriterPool<I> {
    /// Starts `config.threads` writer threads over `index`.
    pub fn new(index: Arc<I>, config: PoolConfig) -> Self {
        let counters = Arc::new(Counters::default());
        let (queues, threads) = (0..config.threads.max(1))
            .map(|i| {
                let inbox = Arc::new(Inbox::new(config.queue_capacity));
                let (index, counters, queue) = (index.clone(), counters.clone(), inbox.clone());
                let thread = std::thread::Builder::new()
                    .name(format!("flash-writer-{i}"))
                    .spawn(move || writer_loop(&*index, &counters, &queue))
                    .expect("failed to spawn a writer thread");
                (inbox, thread)
            })
            .unzip();
        Self {
            index,
            queues,
            threads,
            counters,
        }
    }

    /// The index the pool writes to.
    pub fn index(&self) -> &Arc<I> {
        &self.index
    }

    fn queue(&self, id: u64) -> &Inbox<Batch, Event> {
        &self.queues[thread_of(id, self.queues.len())]
    }

    /// Queues `event`, waiting while its worker's queue is full.
    ///
    /// The event is copied into the pool's buffers, as [`submit_copy`](Self::submit_copy) copies
    /// it, and freed here, on the caller's thread, while it is still in cache, rather than
    /// travelling to a writer and back to be freed in bulk at a later submit (paper, section
    /// 6.24, has what that changed on the trace replay).
    pub fn submit(&self, event: Event) -> Result<(), SubmitError> {
        match self.submit_copy(&event) {
            Ok(()) => Ok(()),
            // The caller gets its own event back, not the copy the refusal made.
            Err(_) => Err(SubmitError::Closed(event)),
        }
    }

    /// Queues a copy of `event`, waiting while its worker's queue is full.
    ///
    /// For a router that keeps its events, or decodes each into a buffer it reuses: the copy is
    /// written into the pool's own buffers, which the writers apply in place and clear for the
    /// next copies, so a steady stream of copies allocates and frees nothing, where
    /// an owned event costs its sender an allocation and a free. On the Mooncake
    /// trace replay through two writers on two cores, that was most of the submitting thread's
    /// time (paper, section 6.11). The buffers keep the room of the largest burst queued since
    /// the last [`flush`](Self::flush), which frees them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use flash_indexer::{Block, DefaultIndexer, Event, LocalHash, SeqHash, Worker};
    /// use flash_indexer::pool::{PoolConfig, WriterPool};
    ///
    /// let pool = WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default());
    /// let w = Worker::new(4, 0);
    /// let mut event = Event::stored(w, 0, None, vec![Block::new(LocalHash(1), SeqHash(11))]);
    /// pool.submit_copy(&event).unwrap();
    /// pool.flush();
    /// assert_eq!(pool.find_matches(&[LocalHash(1)]).get(w), Some(1));
    /// // The same event, refilled: the pool kept a copy, not the buffer.
    /// event = Event::removed(w, 1, vec![SeqHash(11)]);
    /// pool.submit_copy(&event).unwrap();
    /// pool.flush();
    /// assert_eq!(pool.find_matches(&[LocalHash(1)]).get(w), None);
    /// ```
    pub fn submit_copy<'a>(&self, event: impl Into<EventView<'a>>) -> Result<(), SubmitError> {
        let event = event.into();
        self.queue(event.worker.id)
            .send_with(|batch: &mut Batch| batch.copy(event))
            .map_err(|_| SubmitError::Closed(event.to_event()))
    }

    /// Queues `event` if its worker's queue has room; hands it back otherwise. The event itself
    /// is queued, and its writer gives it back to a later submit, which frees it.
    pub fn try_submit(&self, event: Event) -> Result<(), SubmitError> {
        self.queue(event.worker.id)
            .try_send(Msg::Event(event))
            .map_err(|refused| match refused {
                Refused::Full(Msg::Event(event)) => SubmitError::Full(event),
                Refused::Stopped(Msg::Event(event)) => SubmitError::Closed(event),
                _ => unreachable!("the message sent was an event"),
            })
    }

    /// Queues [`KvIndex::remove_worker`] behind the worker's earlier events.
    pub fn remove_worker(&self, id: u64) {
        let _ = self.queue(id).send(Msg::RemoveWorker(id), false);
    }

    /// Queues [`KvIndex::remove_worker_dp_rank`] behind the worker's earlier events.
    pub fn remove_worker_dp_rank(&self, worker: Worker) {
        let _ = self
            .queue(worker.id)
            .send(Msg::RemoveWorkerDpRank(worker), false);
    }

    /// Returns once every event submitted before this call has been applied: a marker goes
    /// through every queue, behind what was already queued, and each writer counts it down
    /// after giving back what it retired ([`KvIndex::flush_retired`]).
    pub fn flush(&self) {
        let latch = Arc::new(Latch::new(self.queues.len()));
        for queue in &self.queues {
            // A stopped writer has nothing left to apply: the refused marker counts down as it
            // is dropped.
            let _ = queue.send(Msg::Flush(Countdown(latch.clone())), true);
        }
        latch.wait();
        // The events applied before the flush, given back before it was counted down.
        for queue in &self.queues {
            queue.reclaim();
        }
    }

    /// Queries the index inline, on the caller's thread.
    pub fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        self.index.find_matches(query)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    /// Writer threads.
    pub fn threads(&self) -> usize {
        self.queues.len()
    }
}

impl<I: KvIndex + ?Sized + 'static> Drop for WriterPool<I> {
    fn drop(&mut self) {
        // Writers apply what is queued, then return.
        for queue in self.queues.drain(..) {
            queue.close();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl<I: KvIndex + ?Sized + 'static> fmt::Debug for WriterPool<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterPool")
            .field("threads", &self.queues.len())
            .field("stats", &self.stats())
            .finish()
    }
}

/// The writer thread of worker `id` among `threads`: Fibonacci hashing, which scales the
/// product's high bits to the thread count, so that dense ids spread evenly (for the ids `0..n`
/// with `n` up to 16,384 and up to 8 threads, the busiest thread has at most 6 ids more than the
/// idlest; paper §6.14).
fn thread_of(id: u64, threads: usize) -> usize {
    let high = id.wrapping_mul(crate::mix::GOLDEN) >> 32;
    ((high * threads as u64) >> 32) as usize
}

/// How long a writer applies events before it lets other threads run (see [`writer_loop`]).
///
/// Without yielding, a writer with a batch to apply can preempt the submitting thread for
/// milliseconds (its slowest query); yielding by a count of events would be a time only for one
/// size of event, and yielding often keeps both writers "cache hot" on one core, so the
/// scheduler stops moving either to the idle one. A millisecond bounds the first without the
/// second. How it was chosen, with the alternatives measured: paper §6.15.
const YIELD_AFTER: Duration = Duration::from_millis(1);

/// Events a writer applies between two looks at the clock for [`YIELD_AFTER`] (a look costs
/// about 20 ns).
const CLOCK_EVERY: usize = 8;

/// Marks the writer's queue stopped when the writer returns or unwinds: later submits fail,
/// and flushes queued behind it count down as they are dropped.
struct StopOnExit<'a>(&'a Inbox<Batch, Event>);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        drop(self.0.stop());
    }
}

/// Applies what `queue` brings until it closes. Events of [`WriterPool::try_submit`], handed
/// over owned, go back to the submitters to be freed (see [`Inbox::give_back`]).
fn writer_loop<I: KvIndex + ?Sized>(index: &I, counters: &Counters, queue: &Inbox<Batch, Event>) {
    let _stop = StopOnExit(queue);
    let (mut batch, mut spent) = (Batch::default(), Vec::new());
    // The flushes of the batch being applied, counted down once it is all applied and the
    // writer keeps no memory of it.
    let mut flushes = Vec::new();
    // Since the writer last let other threads run (or started).
    let mut ran_since = Instant::now();
    while queue.take(&mut batch, &mut spent) {
        let mut taken = 0;
        batch.drain(|msg, buffers| {
            taken += 1;
            if taken % CLOCK_EVERY == 0 && ran_since.elapsed() >= YIELD_AFTER {
                // A thread waiting for this core (a router's query, on a machine with fewer
                // cores than threads) waits about this long at most, not a time slice.
                std::thread::yield_now();
                ran_since = Instant::now();
            }
            match msg {
                Msg::Copied(copied) => counters.count(&index.apply_view(copied.view(buffers))),
                Msg::Event(event) => {
                    counters.count(&index.apply(&event));
                    spent.push(event);
                }
                Msg::RemoveWorker(id) => index.remove_worker(id),
                Msg::RemoveWorkerDpRank(worker) => index.remove_worker_dp_rank(worker),
                Msg::Flush(countdown) => flushes.push(countdown),
            }
        });
        if !flushes.is_empty() {
            index.flush_retired();
            // Given back before the flushes return, so that they free them; the room the
            // burst took is freed too.
            queue.give_back(&mut spent);
            (batch, spent) = (Batch::default(), Vec::new());
            queue.trim();
            for countdown in flushes.drain(..) {
                drop(countdown);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::thread_of;

    #[test]
    fn dense_worker_ids_spread_evenly_over_the_threads() {
        for threads in 1..=8 {
            let mut counts = vec![0_i64; threads];
            for id in 0..1 << 14 {
                counts[thread_of(id, threads)] += 1;
                let (most, least) = (counts.iter().max(), counts.iter().min());
                let spread = most.unwrap() - least.unwrap();
                assert!(spread <= 6, "{threads} threads, ids 0..={id}: {counts:?}");
            }
        }
        // Dynamo's 64 workers, and the halves its removes and churn write to.
        let split = |ids: core::ops::Range<u64>| ids.filter(|&id| thread_of(id, 2) == 0).count();
        assert_eq!((split(0..64), split(0..32), split(32..64)), (32, 16, 16));
    }
}
