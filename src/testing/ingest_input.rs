//! The `ingest` fuzz target's case: the subscriber's path after the socket, on arbitrary bytes.
//!
//! Messages as a subscriber without a replay socket takes them: a sequence number checked by
//! the same tracker, the payload decoded and mapped by the same code, the events queued in a
//! [`WriterPool`](crate::pool::WriterPool) in front of every layout; a gap, a jump or a restart
//! clears the engine's worker, as a resynchronization without a replay buffer does. The
//! reference gets the same events directly, and every layout must answer as it does.
//!
//! With feature `hybrid`, the same batches also go the way
//! [`Subscriber::spawn_hybrid`](crate::ingest::Subscriber::spawn_hybrid) takes them: mapped with
//! their groups for a model of full attention, a sliding window and Mamba, into every layout's
//! [`HybridIndexer`](crate::hybrid::HybridIndexer) and the naive hybrid reference, which must
//! agree on every answer too.

use super::enabled_layouts;
use crate::ingest::sequence::{SeqCheck, SeqTracker};
use crate::ingest::{Engine, EventMapper, MapConfig, decode_batch};
use crate::pool::{PoolConfig, WriterPool};
use crate::sync::Arc;
use crate::{Event, KvIndex, LocalHash, NaiveIndexer};
use std::collections::BTreeSet;

/// The input, read front to back: an engine byte (bit 0: SGLang's hash convention), then
/// messages, each a kind byte (0-4: the next sequence number; 5: a skip of 2-9, one more byte;
/// 6: a step back of 0-3, one more byte; 7: any number, 8 more bytes, little-endian), a payload
/// length (2 bytes, little-endian) and the payload (cut short where the input ends).
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

/// Messages beyond this many are ignored (keeps each run short).
const MAX_MESSAGES: usize = 64;

/// The engine's worker id in every case.
const ENGINE: u64 = 1;

/// Runs one input of the `ingest` fuzz target. `Err` says where a layout differed from the
/// reference; panics and allocations out of proportion are the fuzzer's to catch.
pub fn run_ingest_input(data: &[u8]) -> Result<(), String> {
    let mut input = Input(data);
    let engine = match input.byte() {
        Some(b) if b & 1 == 1 => Engine::Sglang,
        _ => Engine::Vllm,
    };
    let mapper = EventMapper::new(ENGINE, MapConfig::default());
    let naive = NaiveIndexer::default();
    let pools: Vec<_> = enabled_layouts()
        .iter()
        .map(|l| {
            let index: Arc<dyn KvIndex> = Arc::from((l.make)());
            (l.name, WriterPool::new(index, PoolConfig::default()))
        })
        .collect();
    #[cfg(feature = "hybrid")]
    let hybrid = hybrid::Fleet::new();
    let mut tracker = SeqTracker::default();
    let mut workers = BTreeSet::new();
    let mut chains: Vec<Vec<LocalHash>> = Vec::new();
    let mut last = 0u64;
    for _ in 0..MAX_MESSAGES {
        let Some(kind) = input.byte() else {
            break;
        };
        // The sequence number: the next one most often, else a short skip, a step back or any.
        let seq = match kind % 8 {
            0..=4 => last.wrapping_add(1),
            5 => last.wrapping_add(2 + u64::from(input.byte().unwrap_or(0) % 8)),
            6 => last.saturating_sub(u64::from(input.byte().unwrap_or(0) % 4)),
            _ => u64::from_le_bytes(input.take(8).try_into().unwrap_or_default()),
        };
        let len = u16::from_le_bytes(input.take(2).try_into().unwrap_or_default());
        let payload = input.take(usize::from(len));
        if tracker.check(seq) != SeqCheck::Next {
            // No replay socket: the engine's workers are cleared and the stream taken as it comes.
            for &worker in &workers {
                apply_everywhere(&naive, &pools, &Event::cleared(worker, seq))?;
                #[cfg(feature = "hybrid")]
                hybrid.clear(worker, seq)?;
            }
            tracker.reset();
        }
        tracker.applied(seq);
        last = seq;
        let Ok(batch) = decode_batch(payload, engine) else {
            continue;
        };
        let mapped = mapper.map(&batch, seq);
        for event in &mapped.events {
            workers.insert(event.worker);
            if let crate::EventKind::Stored { blocks, .. } = &event.kind {
                chains.push(blocks.iter().map(|b| b.local).collect());
            }
            apply_everywhere(&naive, &pools, event)?;
        }
        #[cfg(feature = "hybrid")]
        hybrid.apply(&mapper, &batch, seq, &mut workers)?;
    }
    #[cfg(feature = "hybrid")]
    hybrid.check(&workers, &chains)?;
    for (name, pool) in &pools {
        pool.flush();
        for worker in &workers {
            let (got, want) = (
                pool.index().block_count(*worker),
                naive.block_count(*worker),
            );
            if got != want {
                return Err(format!(
                    "{name}: {worker:?} holds {got} blocks, reference {want}"
                ));
            }
        }
        for chain in &chains {
            let (got, want) = (pool.find_matches(chain), naive.find_matches(chain));
            for worker in &workers {
                if got.get(*worker) != want.get(*worker) {
                    return Err(format!(
                        "{name}: {worker:?} matches {chain:?} to {:?}, reference {:?}",
                        got.get(*worker),
                        want.get(*worker)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The reference applies `event` now; every pool queues it.
fn apply_everywhere(
    naive: &NaiveIndexer,
    pools: &[(&str, WriterPool<dyn KvIndex>)],
    event: &Event,
) -> Result<(), String> {
    let _ = naive.apply(event);
    for (name, pool) in pools {
        pool.submit(event.clone())
            .map_err(|e| format!("{name}: the pool refused {event:?}: {e}"))?;
    }
    Ok(())
}

/// The hybrid side of a case: the same batches, mapped with their groups.
#[cfg(feature = "hybrid")]
mod hybrid {
    use super::enabled_layouts;
    use crate::hybrid::{
        GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups, NaiveHybridIndexer,
    };
    use crate::ingest::{EventMapper, KvEventBatch};
    use crate::{Event, KvIndex, LocalHash, Worker};
    use std::collections::BTreeSet;

    pub(super) struct Fleet {
        naive: NaiveHybridIndexer,
        layouts: Vec<(&'static str, HybridIndexer<Box<dyn KvIndex>>)>,
    }

    impl Fleet {
        /// Full attention, a window of 32 tokens and Mamba, blocks of 16 (the fuzzer's payloads
        /// say any block size; the mapping takes whole blocks of the event's own).
        pub(super) fn new() -> Fleet {
            let model = ModelGroups::new(vec![
                GroupSpec::new(GroupKind::FullAttention, 16),
                GroupSpec::new(GroupKind::SlidingWindow { window: 32 }, 16),
                GroupSpec::new(GroupKind::Mamba, 16),
            ])
            .expect("a valid model");
            let layouts = enabled_layouts()
                .iter()
                .map(|l| {
                    (
                        l.name,
                        HybridIndexer::with_layout(model.clone(), (l.make)()),
                    )
                })
                .collect();
            Fleet {
                naive: NaiveHybridIndexer::new(model),
                layouts,
            }
        }

        /// Every index takes `event` of `group`; they must agree on whether it was refused.
        fn apply_one(&self, group: u32, event: &Event) -> Result<(), String> {
            let want = self.naive.apply(group, event).map_err(|e| e.kind_name());
            for (name, index) in &self.layouts {
                let got = index.apply(group, event).map_err(|e| e.kind_name());
                if got != want {
                    return Err(format!(
                        "hybrid {name}: {event:?} of group {group} gave {got:?}, reference {want:?}"
                    ));
                }
            }
            Ok(())
        }

        pub(super) fn clear(&self, worker: Worker, seq: u64) -> Result<(), String> {
            let chain = self.naive.model().chain_group();
            self.apply_one(chain, &Event::cleared(worker, seq))
        }

        pub(super) fn apply(
            &self,
            mapper: &EventMapper,
            batch: &KvEventBatch,
            seq: u64,
            workers: &mut BTreeSet<Worker>,
        ) -> Result<(), String> {
            for (group, event) in mapper.map_groups(batch, seq, self.naive.model()).events {
                workers.insert(event.worker);
                self.apply_one(group, &event)?;
            }
            Ok(())
        }

        /// Every group's block counts and every chain's scores, against the reference.
        pub(super) fn check(
            &self,
            workers: &BTreeSet<Worker>,
            chains: &[Vec<LocalHash>],
        ) -> Result<(), String> {
            let groups = self.naive.model().len() as u32;
            for (name, index) in &self.layouts {
                for &worker in workers {
                    for group in 0..groups {
                        let (got, want) = (
                            index.block_count(worker, group),
                            self.naive.block_count(worker, group),
                        );
                        if got != want {
                            return Err(format!(
                                "hybrid {name}: {worker:?} group {group} holds {got}, reference {want}"
                            ));
                        }
                    }
                }
                for chain in chains {
                    let (got, want) = (index.find_matches(chain), self.naive.find_matches(chain));
                    for &worker in workers {
                        if got.get(worker) != want.get(worker) {
                            return Err(format!(
                                "hybrid {name}: {worker:?} scores {chain:?} {:?}, reference {:?}",
                                got.get(worker),
                                want.get(worker)
                            ));
                        }
                    }
                }
            }
            Ok(())
        }
    }
}
