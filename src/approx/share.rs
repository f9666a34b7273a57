//! Router replicas that share their routing decisions, so that each one predicts from every
//! replica's decisions instead of its own share of them.

use super::decision::{Decision, Entry};
use super::log::{DecisionLog, LogError, LogPosition};
use super::routed::index_tag;
use super::{ApproximateIndexer, ForeignRouted, Retention, Routed};
use crate::error::EventError;
use crate::index::KvIndex;
use crate::scores::OverlapScores;
use crate::sync::{Mutex, lock};
use crate::types::{Event, EventView, LocalHash, SeqHash, Worker};
use core::time::Duration;
use foldhash::fast::RandomState;
use std::collections::{HashMap, VecDeque};

/// Entries read from the log per call of [`DecisionLog::read`].
const READ_BATCH: usize = 1024;

/// How long another replica's request stays pinned without its release by default: an hour.
pub const DEFAULT_PIN_LEASE: Duration = Duration::from_secs(3_600);

/// One router replica's approximate index, sharing its decisions through a [`DecisionLog`].
///
/// Each replica applies its own decisions at once (its next query sees them) and publishes
/// them; [`sync`](Self::sync) applies every other replica's decisions, in the log's order, at
/// the times they were made. So every replica predicts from the whole fleet's decisions, a
/// transport's delay behind:
///
/// - **Once each.** Entries carry their origin and a sequence number; a replica applies an
///   origin's entries in increasing order and skips any it has applied (a replay, a re-read
///   after a restart of the reader), and skips its own.
/// - **Time.** A decision applies at its own time, so expiry runs from when it was made, not
///   from when a replica heard of it. Replicas then hold the same predictions up to the order
///   in which concurrent decisions reached each one (a replica's own come first, and a decision
///   older than one already applied counts at the newer one's time, as in any approximate
///   index): a block can expire up to that reordering's span later on one replica than on
///   another, and under an LRU model a full worker can evict another block first. Replicas that
///   [`sync`](Self::sync) before each decision apply every decision in the log's order and hold
///   exactly what one index making every decision would.
/// - **Late or restarted replicas** read the log from its oldest kept entry: the log keeps the
///   retention window, so a new replica starts with what is still predicted. A release whose
///   routing was trimmed, or predates the replica, is counted and ignored. A replica that
///   stops leaves its running requests pinned in the others until their lease ends
///   ([`with_pin_lease`](Self::with_pin_lease)); a replica that restarts is a new origin.
/// - **Transport down.** A failed append or read is counted and the replica keeps routing on
///   what it has; nothing is buffered. Decisions made while the log was down stay local, and
///   replicas converge again as those predictions expire.
///
/// ```
/// use core::time::Duration;
/// use flash_indexer::approx::{MemoryLog, SharedApproximateIndexer};
/// use flash_indexer::{hash, DefaultIndexer, Retention, Worker};
/// use std::sync::Arc;
///
/// let log = Arc::new(MemoryLog::new(Duration::ZERO, Duration::from_secs(120)));
/// let a: SharedApproximateIndexer<DefaultIndexer, _> =
///     SharedApproximateIndexer::new(Retention::default(), log.clone());
/// let b: SharedApproximateIndexer<DefaultIndexer, _> =
///     SharedApproximateIndexer::new(Retention::default(), log);
///
/// let prompt = hash::local_hashes(&(0..256).collect::<Vec<u32>>(), 64);
/// a.record_routing(Worker::new(3, 0), &prompt, Duration::from_secs(1));
/// // Replica b learns of a's decision from the log.
/// assert_eq!(b.sync(Duration::from_secs(1)), Ok(1));
/// assert_eq!(b.find_matches(&prompt).best(), Some((Worker::new(3, 0), 4)));
/// ```
#[derive(Debug)]
pub struct SharedApproximateIndexer<I, L> {
    approx: ApproximateIndexer<I>,
    log: L,
    origin: u64,
    pin_lease: Duration,
    state: Mutex<Replica>,
}

/// What one replica keeps about the log.
#[derive(Debug, Default)]
struct Replica {
    /// This replica's last entry's number.
    seq: u64,
    /// The last log position read.
    read: Option<LogPosition>,
    /// The last entry number applied, per other origin.
    applied: HashMap<u64, u64, RandomState>,
    /// Other replicas' running requests, pinned here until their release arrives or their
    /// lease ends (only under a retention that pins running requests), with their routing time.
    running: HashMap<(u64, u64), (Routed, Duration), RandomState>,
    /// The same requests by routing time, oldest first, for the leases (lazy: an entry whose
    /// request was released is skipped).
    leases: VecDeque<(Duration, (u64, u64))>,
    stats: ShareStats,
}

/// What a replica did with the log, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareStats {
    /// Own decisions appended to the log.
    pub published: u64,
    /// Own decisions the log refused or could not take (they stayed local).
    pub publish_failures: u64,
    /// Other replicas' decisions applied.
    pub applied: u64,
    /// Entries skipped as already applied.
    pub duplicates: u64,
    /// Entries refused as malformed.
    pub malformed: u64,
    /// Releases of requests this replica never saw routed (trimmed, or before it started).
    pub unmatched_releases: u64,
    /// Reads of the log that failed.
    pub read_failures: u64,
    /// Other replicas' requests released here because their lease ended before their release
    /// arrived (their replica stopped, or the release was lost).
    pub expired_pins: u64,
}

impl<I: KvIndex + Default, L: DecisionLog> SharedApproximateIndexer<I, L> {
    /// A replica over an empty `I`, sharing through `log`, with a new random origin tag.
    pub fn new(retention: Retention, log: L) -> Self {
        Self::with_index(ApproximateIndexer::new(retention), log)
    }
}

impl<I: KvIndex, L: DecisionLog> SharedApproximateIndexer<I, L> {
    /// A replica over `approx` (which should hold no predictions yet), sharing through `log`.
    pub fn with_index(approx: ApproximateIndexer<I>, log: L) -> Self {
        Self {
            approx,
            log,
            origin: index_tag(),
            pin_lease: DEFAULT_PIN_LEASE,
            state: Mutex::new(Replica::default()),
        }
    }

    /// The same replica, releasing another replica's request once it has run `lease` without
    /// its release arriving ([`DEFAULT_PIN_LEASE`] otherwise): a replica that stops leaves its
    /// running requests pinned in the others until then.
    pub fn with_pin_lease(mut self, lease: Duration) -> Self {
        self.pin_lease = lease;
        self
    }

    /// The replica's approximate index, holding its own and every applied decision.
    pub fn approximate(&self) -> &ApproximateIndexer<I> {
        &self.approx
    }

    /// The log it shares through.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The tag its entries carry.
    pub fn origin(&self) -> u64 {
        self.origin
    }

    /// Each worker's longest predicted (or exact) prefix of `query`.
    pub fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        self.approx.find_matches(query)
    }

    /// [`ApproximateIndexer::record_routing`], then publishes the decision.
    pub fn record_routing(&self, worker: Worker, locals: &[LocalHash], now: Duration) -> Routed {
        let routed = self.approx.record_routing(worker, locals, now);
        let decision = Decision::Routed {
            request: routed.number(),
            worker,
            locals: locals.to_vec(),
        };
        self.publish(decision, now);
        routed
    }

    /// [`ApproximateIndexer::release`], then publishes the release (only under a retention that
    /// pins running requests: otherwise a release changes nothing anywhere).
    ///
    /// # Errors
    ///
    /// [`ForeignRouted`], changing and publishing nothing, if another index routed the request.
    pub fn release(&self, routed: Routed, now: Duration) -> Result<(), ForeignRouted> {
        self.approx.release(routed, now)?;
        if self.approx.retention().pins_running() {
            let request = routed.number();
            self.publish(Decision::Released { request }, now);
        }
        Ok(())
    }

    /// [`ApproximateIndexer::expire`].
    pub fn expire(&self, now: Duration) {
        self.approx.expire(now)
    }

    /// Applies every entry of the log visible at `now` that this replica has not applied yet,
    /// each at its own time, and returns how many other replicas' decisions it applied.
    ///
    /// # Errors
    ///
    /// [`LogError`] if the log could not be read; what was read before is applied, and the next
    /// call goes on from there.
    pub fn sync(&self, now: Duration) -> Result<usize, LogError> {
        let mut replica = lock(&self.state);
        let mut applied = 0;
        loop {
            let batch = match self.log.read(replica.read, now, READ_BATCH) {
                Ok(batch) => batch,
                Err(e) => {
                    replica.stats.read_failures += 1;
                    return Err(e);
                }
            };
            let full = batch.len() == READ_BATCH;
            for (position, bytes) in batch {
                replica.read = Some(position);
                applied += usize::from(self.apply_entry(&mut replica, &bytes));
            }
            if !full {
                self.end_leases(&mut replica, now);
                return Ok(applied);
            }
        }
    }

    /// Releases other replicas' requests routed a lease or more before `now`, and drops the
    /// front entries of requests released already (so the order stays about as long as the
    /// requests still running).
    fn end_leases(&self, replica: &mut Replica, now: Duration) {
        while let Some(&(at, key)) = replica.leases.front() {
            let running = replica
                .running
                .get(&key)
                .filter(|&&(_, routed_at)| routed_at == at)
                .map(|&(routed, _)| routed);
            match running {
                None => {}
                Some(_) if at + self.pin_lease > now => break,
                Some(routed) => {
                    replica.running.remove(&key);
                    // Routed by this replica's own index: never foreign.
                    let _ = self.approx.release(routed, now);
                    replica.stats.expired_pins += 1;
                }
            }
            replica.leases.pop_front();
        }
    }

    /// What the replica did with the log so far.
    pub fn stats(&self) -> ShareStats {
        lock(&self.state).stats
    }

    /// Appends one own decision; a failure is counted and the decision stays local.
    fn publish(&self, decision: Decision, at: Duration) {
        let mut replica = lock(&self.state);
        replica.seq += 1;
        let entry = Entry {
            origin: self.origin,
            seq: replica.seq,
            at,
            decision,
        };
        match self.log.append(at, &entry.encode()) {
            Ok(()) => replica.stats.published += 1,
            Err(_) => replica.stats.publish_failures += 1,
        }
    }

    /// Applies one entry unless it is malformed, this replica's own, or already applied;
    /// whether it was applied.
    fn apply_entry(&self, replica: &mut Replica, bytes: &[u8]) -> bool {
        let Ok(entry) = Entry::decode(bytes) else {
            replica.stats.malformed += 1;
            return false;
        };
        if entry.origin == self.origin {
            return false;
        }
        let last = replica.applied.entry(entry.origin).or_default();
        if entry.seq <= *last {
            replica.stats.duplicates += 1;
            return false;
        }
        *last = entry.seq;
        match entry.decision {
            Decision::Routed {
                request,
                worker,
                locals,
            } => {
                let routed = self.approx.record_routing(worker, &locals, entry.at);
                if self.approx.retention().pins_running() {
                    let key = (entry.origin, request);
                    replica.running.insert(key, (routed, entry.at));
                    replica.leases.push_back((entry.at, key));
                }
            }
            Decision::Released { request } => {
                match replica.running.remove(&(entry.origin, request)) {
                    Some((routed, _)) => {
                        // Routed by this replica's own index just above: never foreign.
                        let _ = self.approx.release(routed, entry.at);
                    }
                    None => {
                        replica.stats.unmatched_releases += 1;
                        return false;
                    }
                }
            }
        }
        replica.stats.applied += 1;
        true
    }
}

/// The replica's index as any index: engines' events apply exactly (and are not shared: every
/// replica follows the engines that publish); worker removals are this replica's alone.
impl<I: KvIndex, L: DecisionLog> KvIndex for SharedApproximateIndexer<I, L> {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        self.approx.apply(event)
    }
    fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
        self.approx.apply_view(event)
    }
    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        self.approx.find_matches(query)
    }
    fn remove_worker(&self, id: u64) {
        self.approx.remove_worker(id)
    }
    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.approx.remove_worker_dp_rank(worker)
    }
    fn block_count(&self, worker: Worker) -> usize {
        self.approx.block_count(worker)
    }
    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.approx.holds(worker, seq)
    }
    fn block_counts(&self) -> Vec<(Worker, usize)> {
        self.approx.block_counts()
    }
    fn dump(&self) -> Vec<Event> {
        self.approx.dump()
    }
    fn flush_retired(&self) {
        self.approx.flush_retired()
    }
}
