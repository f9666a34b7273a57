#!/usr/bin/env python3
"""Per-call cost from Python, side by side in one process: flash_indexer.RadixTree against
dynamo._core.RadixTree (ai-dynamo-runtime) on Dynamo's published indexer workload shape.

Workload (Dynamo's, as `flashbench compare`'s dynamo preset): 64 workers each store SEQUENCES
sequences of 128 blocks, sequence s opening with the 64-block prefix of group s % 4, one
stored event of 128 blocks per sequence (Dynamo's JSON KvCacheEvent bytes, encoded before the
clock starts); then 2,000 queries of 128 blocks: 50% full hits, 25% diverging at a random
block, 25% first-block misses. Every query's answer is compared.

    pip install --no-deps ai-dynamo-runtime==1.6.1
    python bench/bench_radix_tree.py [--sequences 200] [--layouts positional,array,radix]

Events: wall time of applying every event (Dynamo's tree applies on a background thread, so its
clock stops after a query queued behind the last event returns). Queries: each call timed alone
with perf_counter_ns, ours and Dynamo's alternating, p50 and mean: `find_matches` alone, and
`find_matches(q).scores` (what a router reads: both build the dict when `.scores` is read,
Dynamo's on every read, ours once).
"""

import argparse
import json
import random
import statistics
import time

import flash_indexer as fi
from dynamo._core import RadixTree as DynamoRadixTree

WORKERS, BLOCKS, PREFIX, GROUPS, BLOCK_SIZE = 64, 128, 64, 4, 16


def workload(sequences, seed=7):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1 << 30) for _ in range(PREFIX * BLOCK_SIZE)] for _ in range(GROUPS)]
    events, chains = [], []
    for w in range(WORKERS):
        for s in range(sequences):
            tokens = prefixes[s % GROUPS] + [rng.randrange(1 << 30) for _ in range((BLOCKS - PREFIX) * BLOCK_SIZE)]
            locals_ = fi.local_hashes(tokens, BLOCK_SIZE)
            seqs = fi.seq_hashes(locals_)
            blocks = [{"block_hash": q, "tokens_hash": l} for l, q in zip(locals_, seqs)]
            data = {"stored": {"parent_hash": None, "blocks": blocks}}
            events.append((w, json.dumps({"event_id": s, "data": data, "dp_rank": 0}).encode()))
            chains.append(locals_)
    queries = []
    for _ in range(2_000):
        chain = rng.choice(chains)
        roll = rng.random()
        if roll < 0.5:
            queries.append(list(chain))
        elif roll < 0.75:
            at = rng.randrange(1, BLOCKS)
            queries.append(chain[:at] + [rng.randrange(1 << 63) for _ in range(BLOCKS - at)])
        else:
            queries.append([rng.randrange(1 << 63) for _ in range(BLOCKS)])
    return events, queries


def apply_all(tree, events, sync_query):
    start = time.perf_counter()
    for worker, data in events:
        tree.apply_event(worker, data)
    tree.find_matches(sync_query)  # queued behind the events where they are asynchronous
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=200, help="sequences per worker (Dynamo's: 200)")
    parser.add_argument("--layouts", default="positional,array,radix")
    args = parser.parse_args()
    events, queries = workload(args.sequences)
    blocks = len(events) * BLOCKS
    print(f"{len(events)} stored events of {BLOCKS} blocks over {WORKERS} workers; {len(queries)} queries")
    print("| index | events/s | blocks/s | call p50 us | call mean us | call+.scores p50 us | call+.scores mean us | differing answers |")
    print("|---|---|---|---|---|---|---|---|")
    dynamo = DynamoRadixTree()
    dynamo_seconds = apply_all(dynamo, events, queries[0])
    rows = {}
    for layout in args.layouts.split(","):
        ours = fi.RadixTree(layout)
        seconds = apply_all(ours, events, queries[0])
        ours_ns, theirs_ns, differ = ([], []), ([], []), 0
        for query in queries:
            t0 = time.perf_counter_ns()
            ours.find_matches(query)
            t1 = time.perf_counter_ns()
            dynamo.find_matches(query)
            t2 = time.perf_counter_ns()
            a = ours.find_matches(query).scores
            t3 = time.perf_counter_ns()
            b = dynamo.find_matches(query).scores
            t4 = time.perf_counter_ns()
            ours_ns[0].append(t1 - t0)
            theirs_ns[0].append(t2 - t1)
            ours_ns[1].append(t3 - t2)
            theirs_ns[1].append(t4 - t3)
            differ += a != dict(b)
        rows[layout] = (seconds, ours_ns, theirs_ns, differ)
    theirs_all = tuple([ns for _, _, theirs, _ in rows.values() for ns in theirs[k]] for k in (0, 1))

    def row(name, seconds, ns, differ):
        cells = [f(ns[k]) / 1e3 for k in (0, 1) for f in (statistics.median, statistics.fmean)]
        timings = " | ".join(f"{c:.2f}" for c in cells)
        print(f"| {name} | {len(events) / seconds:,.0f} | {blocks / seconds:,.0f} | {timings} | {differ} |")
        return len(events) / seconds, cells

    base = row("dynamo._core.RadixTree", dynamo_seconds, theirs_all, "-")
    for layout, (seconds, ours_ns, _, differ) in rows.items():
        mine = row(f"flash_indexer.RadixTree({layout!r})", seconds, ours_ns, differ)
        ratios = " | ".join(f"{m / b:.2f}x" for m, b in zip(mine[1], base[1]))
        print(f"|   {layout} / dynamo | {mine[0] / base[0]:.2f}x | | {ratios} | |")


if __name__ == "__main__":
    main()
