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
//!   [`Worker::dp_rank`](crate::Worker::dp_rank), a storage-tier filter, and whole blocks only.
//! - [`Subscriber`]: ZeroMQ SUB sockets, one thread per engine, with gap recovery through the
//!   engine's replay socket and restart detection, feeding a
//!   [`WriterPool`](crate::pool::WriterPool).
//!
//! # Example
//!
//! A router over two engines, answering "best worker for these tokens":
//!
//! ```no_run
//! use std::sync::Arc;
//! use flash_indexer::ingest::{EngineEndpoint, Subscriber, SubscriberConfig};
//! use flash_indexer::pool::{PoolConfig, WriterPool};
//! use flash_indexer::{hash, DefaultIndexer};
//!
//! let pool = Arc::new(WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default()));
//! let engines = ["10.0.0.5", "10.0.0.6"]
//!     .map(|host| EngineEndpoint::new(format!("tcp://{host}:5557")).with_replay(format!("tcp://{host}:5558")));
//! // Topics are `kv@<pod>@<model>`; pods here are named `worker-<id>`.
//! let resolver = |topic: &flash_indexer::ingest::Topic<'_>| topic.pod.strip_prefix("worker-")?.parse().ok();
//! let _subscriber = Subscriber::spawn(Arc::clone(&pool), engines, resolver, SubscriberConfig::default())?;
//!
//! let tokens: Vec<u32> = (0..512).collect();
//! let scores = pool.find_matches(&hash::local_hashes(&tokens, 16));
//! let best = scores.best();
//! # let _ = best;
//! # Ok::<(), flash_indexer::ingest::IngestError>(())
//! ```

mod decode;
mod map;
mod sequence;
mod subscriber;

pub use decode::{
    BlockRemoved, BlockStored, DecodeError, Engine, EngineEvent, KvEventBatch, decode_batch,
};
pub use map::{EventMapper, MapConfig, MapError, Mapped};
pub use sequence::Topic;
pub use subscriber::{
    EngineEndpoint, IngestError, IngestStats, Resolver, Subscriber, SubscriberConfig,
};
