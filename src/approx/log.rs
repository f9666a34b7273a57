//! The transport router replicas share decisions through: an ordered, append-only log of
//! encoded [`Entry`](super::Entry)s that every replica reads from its own position.

use crate::sync::{Mutex, lock};
use core::fmt;
use core::time::Duration;
use std::collections::VecDeque;

/// A place in a [`DecisionLog`]: ordered as the log orders its entries. Two parts, so that a
/// Redis stream ID (`milliseconds-sequence`) is one as it is; the in-process log counts in the
/// second part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition(pub u64, pub u64);

/// A transport failure (the log unreachable, slow or refusing): the decision stays local.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogError(pub String);

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "decision log: {}", self.0)
    }
}

impl std::error::Error for LogError {}

/// An ordered log of encoded decisions, shared by router replicas.
///
/// Implementations keep entries in one order for every reader and may trim old ones; readers
/// skip what was trimmed. See [`MemoryLog`] for the in-process one.
pub trait DecisionLog: Send + Sync {
    /// Appends one encoded entry decided at `at`.
    ///
    /// # Errors
    ///
    /// [`LogError`] when the transport fails; nothing was appended then.
    fn append(&self, at: Duration, entry: &[u8]) -> Result<(), LogError>;

    /// Up to `max` entries after `after` (from the oldest kept when `None`), in log order, that
    /// a reader can see at `now`.
    ///
    /// # Errors
    ///
    /// [`LogError`] when the transport fails.
    fn read(
        &self,
        after: Option<LogPosition>,
        now: Duration,
        max: usize,
    ) -> Result<Vec<(LogPosition, Vec<u8>)>, LogError>;
}

/// An in-process [`DecisionLog`]: replicas in one process (or a simulation of several) share it
/// by reference. An entry decided at `at` becomes visible to reads at `now >= at + delay`
/// (the time a real transport takes; entries after one not yet visible wait behind it, so the
/// order stays the log's), and entries older than the newest by more than the retention window
/// are trimmed.
///
/// ```
/// use core::time::Duration;
/// use flash_indexer::approx::{DecisionLog, MemoryLog};
///
/// let log = MemoryLog::new(Duration::from_millis(5), Duration::from_secs(60));
/// log.append(Duration::from_millis(10), b"entry").unwrap();
/// assert!(log.read(None, Duration::from_millis(14), 16).unwrap().is_empty());
/// assert_eq!(log.read(None, Duration::from_millis(15), 16).unwrap().len(), 1);
/// ```
#[derive(Debug)]
pub struct MemoryLog {
    delay: Duration,
    window: Duration,
    entries: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// The position number of `entries[0]`.
    first: u64,
    /// The latest decision time appended.
    newest: Duration,
    entries: VecDeque<(Duration, Vec<u8>)>,
}

impl MemoryLog {
    /// A log whose entries reach readers `delay` after their decision and are kept for `window`
    /// after the newest one.
    pub fn new(delay: Duration, window: Duration) -> Self {
        Self {
            delay,
            window,
            entries: Mutex::new(Kept::default()),
        }
    }

    /// Entries kept now.
    pub fn len(&self) -> usize {
        lock(&self.entries).entries.len()
    }

    /// Whether no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DecisionLog for MemoryLog {
    fn append(&self, at: Duration, entry: &[u8]) -> Result<(), LogError> {
        let mut kept = lock(&self.entries);
        kept.entries.push_back((at, entry.to_vec()));
        kept.newest = kept.newest.max(at);
        let newest = kept.newest;
        while kept
            .entries
            .front()
            .is_some_and(|&(t, _)| t + self.window < newest)
        {
            kept.entries.pop_front();
            kept.first += 1;
        }
        Ok(())
    }

    fn read(
        &self,
        after: Option<LogPosition>,
        now: Duration,
        max: usize,
    ) -> Result<Vec<(LogPosition, Vec<u8>)>, LogError> {
        let kept = lock(&self.entries);
        let start = after.map_or(0, |p| p.1 + 1).max(kept.first);
        let skip = (start - kept.first) as usize;
        Ok(kept
            .entries
            .iter()
            .skip(skip)
            .zip(start..)
            .take_while(|((at, _), _)| *at + self.delay <= now)
            .take(max)
            .map(|((_, bytes), n)| (LogPosition(0, n), bytes.clone()))
            .collect())
    }
}

use std::sync::Arc; // sync-shim: DecisionLog for the std Arc users hold

macro_rules! forward_decision_log {
    ($($pointer:ident),*) => {$(
        /// Forwards to the pointee: replicas in one process share a log by reference counting,
        /// and a boxed log picks its transport at run time.
        impl<L: DecisionLog + ?Sized> DecisionLog for $pointer<L> {
            fn append(&self, at: Duration, entry: &[u8]) -> Result<(), LogError> {
                (**self).append(at, entry)
            }

            fn read(
                &self,
                after: Option<LogPosition>,
                now: Duration,
                max: usize,
            ) -> Result<Vec<(LogPosition, Vec<u8>)>, LogError> {
                (**self).read(after, now, max)
            }
        }
    )*};
}

forward_decision_log!(Box, Arc);
