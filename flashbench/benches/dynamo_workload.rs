//! Dynamo's published indexer workload (the `dynamo` preset of `flashbench compare`) under
//! criterion: store everything, the query mix, and removing half the workers, for every layout of
//! this build and, with `--features dynamo`, Dynamo's own indexes in their production wrappers.
//!
//! `cargo bench -p flashbench --features dynamo --bench dynamo_workload`. The side-by-side table
//! with exactness and bytes per pair comes from `flashbench compare --presets dynamo`; this bench
//! adds criterion's statistics, and the jump sweep behind the positional layout's `DEFAULT_JUMP`.

use criterion::Criterion;
use flash_indexer::testing::CountingAlloc;
use flash_indexer::{Event, LocalHash};
use flashbench::compare::presets::{self, Phase};
use flashbench::compare::subject::{Subject, SubjectFactory};
use flashbench::compare::subjects;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const THREADS: usize = 2;

struct Parts<'a> {
    stores: &'a [Event],
    queries: &'a [Vec<LocalHash>],
    removes: &'a [Event],
}

fn parts(preset: &presets::Preset) -> Parts<'_> {
    let write = |label| {
        preset.phases.iter().find_map(|p| match p {
            Phase::Write {
                label: l, events, ..
            } if *l == label => Some(events.as_slice()),
            _ => None,
        })
    };
    let queries = preset.phases.iter().find_map(|p| match p {
        Phase::Query {
            label: "query",
            queries,
        } => Some(queries.as_slice()),
        _ => None,
    });
    Parts {
        stores: write("store").expect("the dynamo preset stores"),
        queries: queries.expect("the dynamo preset queries"),
        removes: write("remove").expect("the dynamo preset removes"),
    }
}

/// Submits `events` and waits until the last one is applied.
fn write(subject: &dyn Subject, events: &[Event]) -> Duration {
    let start = Instant::now();
    for e in events {
        subject.submit(e);
    }
    subject.barrier();
    start.elapsed()
}

fn stored(factory: &SubjectFactory, p: &Parts) -> (Box<dyn Subject>, Duration) {
    let subject = (factory.make)(THREADS);
    let took = write(&*subject, p.stores);
    (subject, took)
}

fn criterion_part(c: &mut Criterion, p: &Parts) {
    let mut group = c.benchmark_group("dynamo_workload");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    for factory in subjects() {
        let name = factory.name;
        group.bench_function(format!("store_all/{name}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| stored(&factory, p).1).sum())
        });
        let (subject, _) = stored(&factory, p);
        let mut i = 0;
        group.bench_function(format!("query_mix/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % p.queries.len();
                black_box(subject.query(&p.queries[i]))
            })
        });
        drop(subject);
        group.bench_function(format!("remove_half/{name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let (subject, _) = stored(&factory, p);
                        write(&*subject, p.removes)
                    })
                    .sum()
            })
        });
    }
    group.finish();
}

/// Query p50 and p99 of the positional layout at several jumps on the same data (whole strides
/// of its checkpoints: one, two and four): the measurement behind `DEFAULT_JUMP`.
fn jump_sweep(p: &Parts) {
    use flash_indexer::{Indexer, KvIndex, layouts::PositionalMap};
    println!(
        "\nJump sweep, positional layout (query p50 / p99 of the same {} queries)",
        p.queries.len()
    );
    for jump in [64u32, 128, 256] {
        let index = Indexer::<PositionalMap>::with_jump(jump);
        for e in p.stores {
            index.apply(e).expect("the workload is valid");
        }
        let mut lat: Vec<u64> = p
            .queries
            .iter()
            .map(|q| {
                let start = Instant::now();
                black_box(index.find_matches(q));
                start.elapsed().as_nanos() as u64
            })
            .collect();
        lat.sort_unstable();
        println!(
            "  jump {jump:>3}: p50 {:>6} ns   p99 {:>6} ns",
            lat[lat.len() / 2],
            lat[lat.len() * 99 / 100]
        );
    }
}

fn main() {
    let preset = presets::dynamo();
    let p = parts(&preset);
    let mut criterion = Criterion::default().configure_from_args();
    criterion_part(&mut criterion, &p);
    criterion.final_summary();
    jump_sweep(&p);
}
