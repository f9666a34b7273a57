#!/usr/bin/env python3
"""A prefix-aware router in Python: follows vLLM engines' KV events, and for each request's
tokens (one JSON list per line on stdin) prints the worker that caches the longest prefix.

    python examples/router.py tcp://HOST:5557+tcp://HOST:5558 tcp://HOST2:5557 < requests.jsonl

Each argument is one engine, `EVENTS[+REPLAY]`; engines are workers 0, 1, ... in order. Run it
against the repository's stand-in engines (tests/publisher/vllm_publisher.py) as CI does.
"""

import argparse
import json
import sys

import flash_indexer as fi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engines", nargs="+", help="EVENTS[+REPLAY] address of each engine")
    parser.add_argument("--block-size", type=int, default=16, help="the engines' tokens per KV block")
    parser.add_argument("--layout", default="positional", choices=["positional", "array", "radix"])
    args = parser.parse_args()

    index = fi.Index(args.layout)
    engines = []
    for worker_id, spec in enumerate(args.engines):
        events, _, replay = spec.partition("+")
        engine = {"events": events, "worker_id": worker_id}
        if replay:
            engine["replay"] = replay
        engines.append(engine)
    with fi.Subscriber(index, engines) as subscriber:
        print(f"subscribed to {len(engines)} engines", file=sys.stderr, flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            tokens = json.loads(line)
            subscriber.flush()
            scores = index.find_matches_for_tokens(tokens, args.block_size)
            best = max(scores.items(), key=lambda item: (item[1], -item[0][0], -item[0][1]), default=None)
            if best is None:
                print("best: none (no worker caches the first block)", flush=True)
            else:
                (worker_id, dp_rank), depth = best
                print(f"best: worker {worker_id} rank {dp_rank}, {depth} blocks cached", flush=True)
        print(json.dumps(subscriber.stats()), file=sys.stderr)


if __name__ == "__main__":
    main()
