//! How long a predicted block is kept: [`Retention`].

use core::time::Duration;

/// How an [`ApproximateIndexer`](super::ApproximateIndexer) keeps the blocks it predicts from
/// routing decisions.
///
/// Two models, the two that Dynamo's approximate indexer offers:
/// - [`Retention::ttl`]: a predicted block lives for a fixed time after it was last routed to
///   (Dynamo's default: 120 s). For engines whose capacity the router does not know.
/// - [`Retention::lru`]: an LRU model of each worker's cache of `capacity_blocks` blocks, with
///   the blocks of running requests pinned until [`release`](super::ApproximateIndexer::release).
///   For engines whose capacity the router knows; predicts evictions instead of guessing a time.
///
/// Both bound memory: a worker never holds more than `capacity_blocks` predicted blocks, so an
/// approximate index holds at most `capacity_blocks` × workers of them.
///
/// ```
/// use core::time::Duration;
/// use flash_indexer::Retention;
///
/// let ttl = Retention::default();
/// assert_eq!(ttl.ttl_limit(), Some(Duration::from_secs(120)));
/// let lru = Retention::lru(16_384);
/// assert_eq!((lru.ttl_limit(), lru.capacity_blocks(), lru.pins_running()), (None, 16_384, true));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    ttl: Option<Duration>,
    capacity_blocks: usize,
    pin_running: bool,
}

impl Retention {
    /// Dynamo's default time to live of a predicted block: 120 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

    /// The per-worker bound of the TTL model when none is given: 65,536 blocks (a GPU of a
    /// mid-sized model holds tens of thousands of 16-token blocks).
    pub const DEFAULT_TTL_CAPACITY: usize = 1 << 16;

    /// Blocks expire `ttl` after they were last routed to; a worker keeps at most
    /// [`DEFAULT_TTL_CAPACITY`](Self::DEFAULT_TTL_CAPACITY) of them (least recently routed go
    /// first). Running requests are not tracked: [`release`](super::ApproximateIndexer::release)
    /// does nothing.
    pub fn ttl(ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            capacity_blocks: Self::DEFAULT_TTL_CAPACITY,
            pin_running: false,
        }
    }

    /// An LRU model of a cache of `capacity_blocks` blocks per worker: the blocks of a running
    /// request are pinned until it is released, then become evictable in LRU order, tails
    /// first. Nothing expires with time. A capacity of 0 predicts nothing.
    pub fn lru(capacity_blocks: usize) -> Self {
        Self {
            ttl: None,
            capacity_blocks,
            pin_running: true,
        }
    }

    /// The same model with another per-worker bound.
    pub fn with_capacity(self, capacity_blocks: usize) -> Self {
        Self {
            capacity_blocks,
            ..self
        }
    }

    /// The same model with a time to live as well (for [`lru`](Self::lru): pinned blocks never
    /// expire; a released block expires `ttl` after its release).
    pub fn with_ttl(self, ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            ..self
        }
    }

    /// The time to live, if blocks expire with time.
    pub fn ttl_limit(&self) -> Option<Duration> {
        self.ttl
    }

    /// Predicted blocks a worker keeps at most.
    pub fn capacity_blocks(&self) -> usize {
        self.capacity_blocks
    }

    /// Whether a routed request pins its blocks until it is released.
    pub fn pins_running(&self) -> bool {
        self.pin_running
    }
}

impl Default for Retention {
    /// [`Retention::ttl`] with Dynamo's 120 s.
    fn default() -> Self {
        Self::ttl(Self::DEFAULT_TTL)
    }
}
