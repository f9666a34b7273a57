//! The subscriber's counters: shared by its endpoint threads, read as one snapshot.

use std::fmt;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Mutex, lock};

crate::counters::counters! {
    /// Counters of a [`Subscriber`](super::Subscriber), read with
    /// [`Subscriber::stats`](super::Subscriber::stats). Every counter saturates at `u64::MAX`
    /// instead of wrapping.
    IngestStats, Counters {
        /// Connections whose handshake completed: first connections and reconnections.
        connected,
        /// Connections dropped: the engine went away, or sent a message over
        /// [`SubscriberConfig::max_message_size`](super::SubscriberConfig::max_message_size) (ZeroMQ
        /// does not say which).
        disconnects,
        /// Payloads decoded and handed to the pool, live or replayed.
        batches,
        /// Index events submitted to the pool, or applied to a hybrid index
        /// ([`Subscriber::spawn_hybrid`](super::Subscriber::spawn_hybrid)).
        events,
        /// Events a hybrid index the subscriber applies itself refused (nothing changed); a
        /// writer pool counts its own in [`PoolStats`](crate::pool::PoolStats).
        index_refused,
        /// Events a hybrid index applied with a warning (a removal naming blocks it did not
        /// hold).
        index_warnings,
        /// Messages that were not `[topic, 8-byte seq, payload]`.
        bad_frames,
        /// Messages whose worker could not be resolved (no worker on the endpoint and a topic the
        /// resolver did not map, or a bound endpoint already tracking its maximum of topics).
        unresolved_topics,
        /// Payloads that failed to decode (nothing of them applied).
        decode_errors,
        /// Events of unknown types, skipped.
        unknown_events,
        /// Events of tiers or groups the configuration filters out.
        filtered_events,
        /// Events rejected by the mapping (tokens not whole blocks, ...).
        rejected_events,
        /// Sequence gaps seen.
        gaps,
        /// Messages recovered through replay to fill gaps.
        replayed,
        /// Messages lost: skipped sequence numbers that no replay filled (at most 2^32 a gap).
        lost,
        /// Sequence numbers over 2^32 ahead of the last: no engine skipped that many, so they
        /// are counted here rather than as lost messages, and the publisher is resynchronized.
        jumps,
        /// Sequence numbers that went backwards outside a replay: engine restarts.
        restarts,
        /// Resynchronizations: the engine's workers cleared and rebuilt from its replay buffer
        /// (after every connection, restart and unrepaired loss).
        resyncs,
        /// Batches rebuilt by resynchronizations.
        resync_batches,
        /// Live messages skipped because a resynchronization had applied them already.
        skipped,
        /// Replays given up: no end marker within
        /// [`SubscriberConfig::replay_timeout`](super::SubscriberConfig::replay_timeout), or a replay
        /// socket that never came up.
        replays_abandoned,
    }
}

/// Adds `by`, saturating at `u64::MAX`.
pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    if by > 0 {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_add(by))
        });
    }
}

/// Counters and the last problem, shared by the endpoint threads and the subscriber.
#[derive(Default)]
pub(crate) struct Monitor {
    pub(crate) counters: Counters,
    last_problem: Mutex<Option<String>>,
}

impl Monitor {
    pub(crate) fn problem(&self, endpoint: &str, what: impl fmt::Display) {
        *lock(&self.last_problem) = Some(format!("{endpoint}: {what}"));
    }

    pub(crate) fn last_problem(&self) -> Option<String> {
        lock(&self.last_problem).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_saturate() {
        let counters = Counters::default();
        bump(&counters.lost, u64::MAX - 1);
        bump(&counters.lost, 5);
        assert_eq!(counters.snapshot().lost, u64::MAX);
    }
}
