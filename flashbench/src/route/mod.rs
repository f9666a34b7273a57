//! `flashbench route`: a closed loop of router, index and mock engines over a request trace.
//!
//! Each request of the trace arrives at its time; the router picks a worker by its policy (the
//! KV-aware ones query an index); the worker's engine admits it at once, reusing the longest
//! prefix of its blocks it has cached and allocating the rest (evicting unreferenced blocks in
//! LRU order); prefills run one at a time per engine at a fixed speed, so a request waits for
//! the prefills queued before it; its output decodes at a fixed speed beside the others, and
//! when it finishes its blocks are released, tail first. Engines publish their events (blocks
//! removed at admission, stored when the prefill is done), which reach the router after a fixed
//! delay. What the model leaves out is in the paper (`papers/flash-indexer.md`, §6.3).
//!
//! Per policy: the prefix-cache hit rate (cached prompt blocks / prompt blocks), simulated time
//! to first token (queueing plus uncached prefill), load imbalance (max/mean running requests at
//! each arrival), the bytes its index holds at the end, and decisions per second of the router's
//! own time.

mod output;
pub mod policy;
pub mod replicas;
pub use output::{Limits, table, write};
#[cfg(feature = "dynamo")]
pub mod dynamo;

use crate::engine::{Engine, prompt_tokens};
use crate::trace::Request as TraceRequest;
use flash_indexer::hash::{local_hashes, seq_hashes};
use flash_indexer::testing::{CountingAlloc, collect_garbage};
use flash_indexer::{Block, Event, LocalHash, SeqHash, Worker};
use policy::{Loads, Policy, Request};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::time::{Duration, Instant};

/// The simulated fleet.
#[derive(Clone, Debug, Serialize)]
pub struct RouteConfig {
    pub workers: u64,
    /// KV block slots of each engine.
    pub capacity_blocks: usize,
    pub block_size: usize,
    /// Prefill speed of an engine, tokens per second (one prefill at a time).
    pub prefill_tokens_per_s: f64,
    /// Decode speed of one request, tokens per second.
    pub decode_tokens_per_s: f64,
    /// How long an engine's event takes to reach the router, microseconds.
    pub event_delay_us: u64,
    /// Offered load: trace time is divided by this.
    pub load: f64,
    /// The weight of uncached prompt blocks against running blocks in the KV-aware cost.
    pub overlap_weight: f64,
    /// How late a router replica's decision reaches the others when they share decisions,
    /// microseconds (see [`replicas`]).
    pub share_delay_us: u64,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            workers: 16,
            capacity_blocks: 4096,
            block_size: 64,
            prefill_tokens_per_s: 20_000.0,
            decode_tokens_per_s: 60.0,
            event_delay_us: 20_000,
            load: 1.0,
            overlap_weight: 1.0,
            share_delay_us: 1_000,
        }
    }
}

/// A trace request, hashed once for every policy.
pub struct Prepared<'a> {
    pub arrival_us: u64,
    pub source: &'a TraceRequest,
    pub prompt_tokens: usize,
    pub locals: Vec<LocalHash>,
    pub seqs: Vec<SeqHash>,
}

/// Hashes every request's prompt into blocks of `block_size` tokens.
pub fn prepare<'a>(trace: &'a [TraceRequest], block_size: usize) -> Vec<Prepared<'a>> {
    trace
        .iter()
        .map(|r| {
            let tokens = prompt_tokens(r, 0);
            let locals = local_hashes(&tokens, block_size.max(1));
            let seqs = seq_hashes(&locals);
            Prepared {
                arrival_us: r.timestamp * 1000,
                source: r,
                prompt_tokens: tokens.len(),
                locals,
                seqs,
            }
        })
        .collect()
}

/// The hit rate of one infinite cache that has seen every earlier request: the trace's limit.
pub fn infinite_cache_hit_rate(requests: &[Prepared<'_>]) -> f64 {
    let mut seen = HashSet::new();
    let (mut hits, mut blocks) = (0u64, 0u64);
    for r in requests {
        blocks += r.seqs.len() as u64;
        hits += r.seqs.iter().take_while(|s| seen.contains(*s)).count() as u64;
        seen.extend(r.seqs.iter().copied());
    }
    hits as f64 / blocks.max(1) as f64
}

/// The hit rate of one LRU cache of `capacity_blocks` blocks that serves every request in
/// trace order, one at a time: what the fleet's capacity allows if it were one cache that every
/// request could reach (no policy on separate caches does better on a trace whose reuse is
/// spread out in time).
pub fn pooled_cache_hit_rate(requests: &[Prepared<'_>], capacity_blocks: usize) -> f64 {
    let mut engine = Engine::default();
    let (mut hits, mut blocks) = (0u64, 0u64);
    let mut evicted = Vec::new();
    for r in requests {
        let n = r.seqs.len();
        let mut held = 0;
        while held < n && engine.pin(r.seqs[held].0).is_some() {
            held += 1;
        }
        hits += held as u64;
        blocks += n as u64;
        while held < n && engine.allocate(r.seqs[held].0, 0, capacity_blocks, &mut evicted) {
            held += 1;
        }
        for seq in r.seqs[..held].iter().rev() {
            engine.release(seq.0);
        }
        evicted.clear();
    }
    hits as f64 / blocks.max(1) as f64
}

/// What one policy achieved.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub policy: String,
    pub load: f64,
    pub requests: usize,
    pub hit_rate: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub imbalance: f64,
    pub index_bytes: i64,
    /// Requests routed per second of the policy's own time: its choices, and the releases of
    /// the requests it routed (an approximate index's bookkeeping at the end of a request).
    pub decisions_per_s: f64,
    /// The policy's whole time per request, microseconds: choices, releases, and the engines'
    /// events it applies (an exact index's writes happen there, an approximate index's in its
    /// choices), so that exact and approximate routing compare on the same work.
    pub index_us_per_request: f64,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// A request finished on a worker: (request, worker).
    Finish(usize, u64),
    /// An engine event reaches the router (its number in `events`).
    Deliver(usize),
}

/// Runs `policy` over `requests` in a closed loop and measures it.
pub fn simulate(requests: &[Prepared<'_>], cfg: &RouteConfig, policy: &mut dyn Policy) -> Outcome {
    let workers = cfg.workers.max(1) as usize;
    let bs = cfg.block_size.max(1);
    let us_per_prefill_token = 1e6 / cfg.prefill_tokens_per_s.max(1e-9);
    let us_per_decode_token = 1e6 / cfg.decode_tokens_per_s.max(1e-9);
    let scale = |t: u64| (t as f64 / cfg.load.max(1e-9)) as u64;
    let mut engines: Vec<Engine> = (0..workers).map(|_| Engine::default()).collect();
    let mut busy_until = vec![0u64; workers];
    let mut running = vec![0u32; workers];
    let mut active_blocks = vec![0u64; workers];
    let mut held_by: Vec<usize> = vec![0; requests.len()];
    // Ties in time go in a fixed order (finishes, by request, before deliveries, in order).
    let mut due: BinaryHeap<Reverse<(u64, Due)>> = BinaryHeap::new();
    let mut events: Vec<Option<Event>> = Vec::new();
    let (mut hits, mut blocks) = (0u64, 0u64);
    let mut ttft_us = Vec::with_capacity(requests.len());
    let mut imbalance = (0.0f64, 0u64);
    let (mut deciding, mut releasing, mut observing) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let pace = policy.pace().map(|speed| (speed, Instant::now()));

    for (i, request) in requests.iter().enumerate() {
        let now = scale(request.arrival_us);
        while let Some(Reverse((t, _))) = due.peek() {
            if *t > now {
                break;
            }
            let Reverse((t, what)) = due.pop().expect("peeked");
            match what {
                Due::Finish(r, w) => {
                    let w_ = w as usize;
                    let req = &requests[r];
                    for seq in req.seqs[..held_by[r]].iter().rev() {
                        engines[w_].release(seq.0);
                    }
                    running[w_] -= 1;
                    active_blocks[w_] -= req.seqs.len() as u64;
                    let t0 = Instant::now();
                    policy.finished(r, w, t);
                    releasing += t0.elapsed();
                }
                Due::Deliver(e) => {
                    if let Some(event) = events[e].take() {
                        let t0 = Instant::now();
                        policy.observe(&event);
                        observing += t0.elapsed();
                    }
                }
            }
        }
        if let Some((speed, start)) = pace {
            let wall = Duration::from_secs_f64(now as f64 / 1e6 / speed);
            if let Some(wait) = wall.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }

        let source = request.source;
        let make_tokens = || prompt_tokens(source, 0);
        let routed = Request {
            index: i,
            now_us: now,
            locals: &request.locals,
            tokens: &make_tokens,
        };
        let loads = Loads {
            running: &running,
            active_blocks: &active_blocks,
        };
        let t0 = Instant::now();
        let w = (policy.choose(&routed, &loads) as usize).min(workers - 1);
        deciding += t0.elapsed();

        // The engine admits the request: cached prefix, then new blocks while there is room.
        let engine = &mut engines[w];
        let n = request.seqs.len();
        let mut held = 0;
        while held < n && engine.pin(request.seqs[held].0).is_some() {
            held += 1;
        }
        let cached = held;
        let start = now.max(busy_until[w]);
        let uncached_tokens = request.prompt_tokens - cached * bs;
        let prefill_done = start + (uncached_tokens as f64 * us_per_prefill_token) as u64;
        busy_until[w] = prefill_done;
        let mut evicted = Vec::new();
        while held < n
            && engine.allocate(
                request.seqs[held].0,
                prefill_done,
                cfg.capacity_blocks,
                &mut evicted,
            )
        {
            held += 1;
        }
        held_by[i] = held;
        let worker = Worker::new(w as u64, 0);
        let mut publish = |at: u64, event: Event| {
            events.push(Some(event));
            due.push(Reverse((
                at + cfg.event_delay_us,
                Due::Deliver(events.len() - 1),
            )));
        };
        if !evicted.is_empty() {
            publish(
                now,
                Event::removed(worker, 0, evicted.into_iter().map(SeqHash).collect()),
            );
        }
        if held > cached {
            let parent = cached.checked_sub(1).map(|p| request.seqs[p]);
            let new = (cached..held)
                .map(|k| Block::new(request.locals[k], request.seqs[k]))
                .collect();
            publish(prefill_done, Event::stored(worker, 0, parent, new));
        }
        let finish =
            prefill_done + (request.source.output_length as f64 * us_per_decode_token) as u64;
        due.push(Reverse((finish, Due::Finish(i, w as u64))));
        running[w] += 1;
        active_blocks[w] += n as u64;

        hits += cached as u64;
        blocks += n as u64;
        ttft_us.push(prefill_done - now);
        let total: u32 = running.iter().sum();
        let max = *running.iter().max().unwrap_or(&0);
        imbalance.0 += f64::from(max) * workers as f64 / f64::from(total);
        imbalance.1 += 1;
    }

    ttft_us.sort_unstable();
    let quantile = |q: f64| {
        ttft_us
            .get(((ttft_us.len() as f64 * q) as usize).min(ttft_us.len().saturating_sub(1)))
            .map_or(0.0, |&us| us as f64 / 1000.0)
    };
    Outcome {
        policy: policy.name(),
        load: cfg.load,
        requests: requests.len(),
        hit_rate: hits as f64 / blocks.max(1) as f64,
        ttft_p50_ms: quantile(0.5),
        ttft_p99_ms: quantile(0.99),
        imbalance: imbalance.0 / imbalance.1.max(1) as f64,
        index_bytes: 0,
        decisions_per_s: requests.len() as f64 / (deciding + releasing).as_secs_f64().max(1e-9),
        index_us_per_request: (deciding + releasing + observing).as_secs_f64() * 1e6
            / requests.len().max(1) as f64,
    }
}

/// Builds a policy for a fleet.
pub type MakePolicy = Box<dyn Fn(&RouteConfig) -> Box<dyn Policy>>;

/// A named way to build a policy, so that each run starts from an empty index.
pub struct PolicyFactory {
    pub name: String,
    pub make: MakePolicy,
}

/// A fleet's retention for an approximate policy.
type MakeRetention = fn(&RouteConfig) -> flash_indexer::Retention;

/// The approximate policies: Dynamo's TTL (with the engines' capacity as a bound) and the LRU
/// model of each engine's capacity.
const APPROXIMATE: [(&str, MakeRetention); 2] = [
    ("kv-approx/ttl", |cfg| {
        flash_indexer::Retention::default().with_capacity(cfg.capacity_blocks)
    }),
    ("kv-approx/lru", |cfg| {
        flash_indexer::Retention::lru(cfg.capacity_blocks)
    }),
];

/// Every policy of this build: random, round-robin, least-loaded, exact KV-aware over each
/// primary layout, approximate KV-aware (TTL and LRU), and with the `dynamo` feature, CRTC
/// KV-aware and Dynamo's approximate indexer (`dynamo_speed`: its pace, see [`dynamo`]).
pub fn policies(#[allow(unused_variables)] dynamo_speed: f64) -> Vec<PolicyFactory> {
    use policy::*;
    let mut out: Vec<PolicyFactory> = vec![
        PolicyFactory {
            name: "random".into(),
            make: Box::new(|_| Box::new(Random(0x5eed))),
        },
        PolicyFactory {
            name: "round-robin".into(),
            make: Box::new(|_| Box::new(RoundRobin)),
        },
        PolicyFactory {
            name: "least-loaded".into(),
            make: Box::new(|_| Box::new(LeastLoaded)),
        },
    ];
    for layout in flash_indexer::testing::enabled_layouts()
        .into_iter()
        .filter(|l| l.primary)
    {
        let name = format!("kv-exact/{}", layout.name);
        out.push(PolicyFactory {
            name: name.clone(),
            make: Box::new(move |cfg| {
                Box::new(ExactKv {
                    name: name.clone(),
                    index: (layout.make)(),
                    overlap_weight: cfg.overlap_weight,
                })
            }),
        });
    }
    for (name, retention) in APPROXIMATE {
        out.push(PolicyFactory {
            name: name.into(),
            make: Box::new(move |cfg| {
                Box::new(ApproximateKv::new(name, retention(cfg), cfg.overlap_weight))
            }),
        });
    }
    #[cfg(feature = "dynamo")]
    out.extend(dynamo::policies(dynamo_speed));
    out
}

/// The approximate policies run by `n` router replicas for each `n` of `routers` above 1, each
/// isolated and shared (through a log delivering decisions [`RouteConfig::share_delay_us`]
/// late): named `kv-approx/ttl x4 shared` and so on.
pub fn replicated_policies(routers: &[usize]) -> Vec<PolicyFactory> {
    use replicas::{Replicated, Sharing};
    let mut out = Vec::new();
    for (base, retention) in APPROXIMATE {
        for &n in routers.iter().filter(|&&n| n > 1) {
            for (mode, shared) in [("isolated", false), ("shared", true)] {
                let name = format!("{base} x{n} {mode}");
                out.push(PolicyFactory {
                    name: name.clone(),
                    make: Box::new(move |cfg| {
                        let delay = Duration::from_micros(cfg.share_delay_us);
                        let sharing = if shared {
                            Sharing::Shared { delay }
                        } else {
                            Sharing::Isolated
                        };
                        Box::new(Replicated::new(
                            name.clone(),
                            n,
                            retention(cfg),
                            sharing,
                            cfg.overlap_weight,
                        ))
                    }),
                });
            }
        }
    }
    out
}

/// Of one policy's rounds, in the order they ran, the one of median decisions per second (as
/// [`crate::report::median`] takes it: the upper middle one of an even count), with the first
/// round's index bytes. The routing is the same in every round; only times and bytes differ, and
/// a later round's bytes can be off by memory an earlier policy's threads free while it runs
/// (Dynamo's indexer frees its index after it is dropped).
///
/// # Panics
///
/// If `rounds` is empty.
pub fn median_round(mut rounds: Vec<Outcome>) -> Outcome {
    let index_bytes = rounds.first().expect("a round").index_bytes;
    rounds.sort_by(|a, b| a.decisions_per_s.total_cmp(&b.decisions_per_s));
    let middle = rounds.len() / 2;
    Outcome {
        index_bytes,
        ..rounds.swap_remove(middle)
    }
}

/// Waits (up to two seconds) until the heap stops changing: an index dropped by the last run
/// may still be freed by its own threads (Dynamo's frees hundreds of MiB that way), which would
/// slow the next run down and shift the bytes it measures.
fn settle() {
    collect_garbage();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = CountingAlloc::live_bytes();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = CountingAlloc::live_bytes();
        if now == last {
            break;
        }
        last = now;
    }
}

/// Runs `factory`'s policy and measures it, with the bytes its index holds at the end (the
/// policy's own bookkeeping left out).
pub fn run(requests: &[Prepared<'_>], cfg: &RouteConfig, factory: &PolicyFactory) -> Outcome {
    settle();
    let before = CountingAlloc::live_bytes();
    let mut policy = (factory.make)(cfg);
    let mut outcome = simulate(requests, cfg, policy.as_mut());
    collect_garbage();
    outcome.index_bytes =
        (CountingAlloc::live_bytes() - before - policy.bookkeeping_bytes() as isize) as i64;
    drop(policy);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Request as TraceRequest, any_request, shared_prompts, synthetic};
    use proptest::prelude::*;

    fn outcomes(trace: &[TraceRequest], cfg: &RouteConfig) -> Vec<Outcome> {
        let requests = prepare(trace, cfg.block_size);
        policies(1_000.0)
            .iter()
            .chain(&replicated_policies(&[2]))
            .filter(|p| !p.name.starts_with("dynamo/kv-approx"))
            .map(|p| simulate(&requests, cfg, (p.make)(cfg).as_mut()))
            .collect()
    }

    /// Exact indexes route identically: every exact policy gets the reference's hit rate and
    /// TTFTs (and KV-aware routing beats hashing requests to workers).
    #[test]
    fn exact_policies_agree_with_the_reference_and_beat_random() {
        for trace in [synthetic(600, 5), shared_prompts(600, 5)] {
            let cfg = RouteConfig {
                workers: 4,
                capacity_blocks: 800,
                ..RouteConfig::default()
            };
            let requests = prepare(&trace, cfg.block_size);
            let mut naive = policy::ExactKv {
                name: "naive".into(),
                index: Box::new(flash_indexer::NaiveIndexer::new()),
                overlap_weight: 1.0,
            };
            let reference = simulate(&requests, &cfg, &mut naive);
            let all = outcomes(&trace, &cfg);
            let random = all.iter().find(|o| o.policy == "random").unwrap();
            for o in all.iter().filter(|o| o.policy.starts_with("kv-exact")) {
                assert_eq!(
                    (o.hit_rate, o.ttft_p50_ms, o.ttft_p99_ms),
                    (
                        reference.hit_rate,
                        reference.ttft_p50_ms,
                        reference.ttft_p99_ms
                    ),
                    "{}",
                    o.policy
                );
                assert!(o.hit_rate > random.hit_rate, "{o:?} vs {random:?}");
            }
            assert!(reference.hit_rate <= infinite_cache_hit_rate(&requests));
        }
    }

    /// Replicas that share decisions without delay each apply every decision in the log's
    /// order before deciding, so they route exactly as one router does; isolated ones do not.
    #[test]
    fn replicas_sharing_without_delay_route_as_one_router() {
        let cfg = RouteConfig {
            workers: 4,
            capacity_blocks: 300,
            share_delay_us: 0,
            ..RouteConfig::default()
        };
        let trace = shared_prompts(600, 5);
        let requests = prepare(&trace, cfg.block_size);
        let all = policies(1_000.0);
        let replicated = replicated_policies(&[4]);
        let outcome = |name: &str| {
            let factory = all
                .iter()
                .chain(&replicated)
                .find(|p| p.name == name)
                .unwrap();
            simulate(&requests, &cfg, (factory.make)(&cfg).as_mut())
        };
        for base in ["kv-approx/ttl", "kv-approx/lru"] {
            let one = outcome(base);
            let shared = outcome(&format!("{base} x4 shared"));
            let isolated = outcome(&format!("{base} x4 isolated"));
            assert_eq!(
                (shared.hit_rate, shared.ttft_p50_ms, shared.ttft_p99_ms),
                (one.hit_rate, one.ttft_p50_ms, one.ttft_p99_ms),
                "{base}"
            );
            assert!(isolated.hit_rate < one.hit_rate, "{isolated:?} vs {one:?}");
        }
    }

    #[test]
    fn a_row_of_rounds_is_the_median_round_with_the_first_rounds_bytes() {
        let round = |decisions_per_s: f64, index_bytes: i64| Outcome {
            policy: "p".into(),
            load: 1.0,
            requests: 10,
            hit_rate: 0.5,
            ttft_p50_ms: 1.0,
            ttft_p99_ms: 2.0,
            imbalance: 1.0,
            index_bytes,
            decisions_per_s,
            index_us_per_request: 1e6 / decisions_per_s,
        };
        let row = median_round(vec![round(30.0, 7), round(10.0, -5), round(20.0, 0)]);
        assert_eq!((row.decisions_per_s, row.index_bytes), (20.0, 7));
        assert_eq!(row.index_us_per_request, 1e6 / 20.0);
        let row = median_round(vec![round(10.0, 3), round(40.0, 1)]);
        assert_eq!((row.decisions_per_s, row.index_bytes), (40.0, 3));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Every trace shape the format allows runs under every policy, with hit rates in [0, 1].
        #[test]
        fn every_trace_shape_routes(
            trace in proptest::collection::vec(any_request(), 0..24),
            workers in 1u64..4,
            capacity_blocks in 0usize..64,
            block_size in prop_oneof![Just(1usize), Just(16), Just(64), Just(512)],
            load in prop_oneof![Just(0.5f64), Just(1.0), Just(8.0)],
        ) {
            let cfg = RouteConfig { workers, capacity_blocks, block_size, load, ..RouteConfig::default() };
            for o in outcomes(&trace, &cfg) {
                prop_assert!((0.0..=1.0).contains(&o.hit_rate), "{:?}", o);
                prop_assert_eq!(o.requests, trace.len());
            }
        }
    }
}
