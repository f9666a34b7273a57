//! Engine KV events in, index events out (feature `vllm`).
//!
//! A router does not build [`Event`](crate::Event)s by hand: it subscribes to its engines. This
//! module takes vLLM's and SGLang's KV event streams as they are published today and keeps any
//! [`KvIndex`](crate::KvIndex) current:
//!
//! - [`decode_batch`]: msgpack bytes to a [`KvEventBatch`], in both live encodings (positional
//!   arrays and `"type"`-tagged maps); hashes as integers of any width and sign, or as digest
//!   bytes ([`Engine`] says which 8 bytes).
//! - [`EventMapper`]: engine events to index events: local hashes from the tokens (with the
//!   LoRA seed), engine hashes as opaque [`SeqHash`](crate::SeqHash)es, data-parallel ranks as
//!   [`Worker::dp_rank`](crate::Worker::dp_rank), a storage-tier filter, and whole blocks only;
//!   for models with several KV-cache groups, [`EventMapper::map_groups`] keeps each event's
//!   group for a [`HybridIndex`](crate::hybrid::HybridIndex).
//! - [`Subscriber`]: ZeroMQ SUB sockets (dialled or bound, `tcp://` or `ipc://`), one thread
//!   per endpoint, with gap repair through the engine's replay socket and resynchronization after
//!   every reconnection, restart and unrepaired loss, feeding a
//!   [`WriterPool`](crate::pool::WriterPool), or a hybrid index
//!   ([`Subscriber::spawn_hybrid`]).
//!
//! [`Subscriber`]'s docs show the wiring; `examples/router.rs` is a whole router over it, and
//! `tests/publisher/vllm_publisher.py` a stand-in for vLLM engines to run it against.

mod decode;
mod endpoint;
#[cfg(feature = "hybrid")]
mod groups;
mod map;
mod mediums;
pub(crate) mod sequence;
mod sink;
mod stats;
mod subscriber;
mod transport;

pub use decode::{
    BlockRemoved, BlockStored, DecodeError, Engine, EngineEvent, KvEventBatch, RawExtraKey,
    decode_batch,
};
pub use endpoint::{Dial, DpRank, EngineEndpoint, IngestError, SubscriberConfig};
#[cfg(feature = "hybrid")]
pub use groups::MappedGroups;
pub use map::{EventMapper, MapConfig, MapError, Mapped};
pub use sequence::Topic;
pub use stats::IngestStats;
pub use subscriber::{Resolver, Subscriber};
