"""Subscriber against the repository's stand-in for vLLM engines (tests/publisher/
vllm_publisher.py: vLLM's event structs and sockets over loopback ZeroMQ, two pods of two ranks):
once everything is published and flushed, every block each rank holds is found at its chain's
depth, and only there. Needs pyzmq and msgspec (CI installs them)."""

import json
import os
import subprocess
import sys
import time

import pytest

import flash_indexer as fi

pytest.importorskip("zmq")
pytest.importorskip("msgspec")

PUBLISHER = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "publisher", "vllm_publisher.py")
BLOCK_SIZE = 16


def chain_of(held, seq):
    """The local hashes of the chain ending at `seq`, or None if a parent is missing."""
    locals_ = []
    while seq is not None:
        if seq not in held:
            return None
        parent, tokens, lora = held[seq]
        locals_.append(fi.local_hashes(tokens, BLOCK_SIZE, lora_name=lora)[0])
        seq = parent
    return locals_[::-1]


def test_subscriber_follows_the_publisher():
    port = 27_000 + (os.getpid() % 500) * 8
    publisher = subprocess.Popen(
        [sys.executable, PUBLISHER, "--port-base", str(port), "--batches", "150", "--serve-seconds", "30"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pods = json.loads(publisher.stdout.readline())["pods"]
        index = fi.Index("radix")
        engines = [
            {"events": pod["events"], "replay": pod["replay"], "worker_id": i} for i, pod in enumerate(pods)
        ]
        with fi.Subscriber(index, engines) as subscriber:
            done = json.loads(publisher.stdout.readline())["done"]
            for _ in range(100):
                subscriber.flush()
                if subscriber.stats()["batches"] >= done["batches"]:
                    break
                time.sleep(0.05)
            stats = subscriber.stats()
        assert stats["batches"] >= done["batches"], stats
        assert stats["decode_errors"] == 0 and stats["lost"] == 0, stats
        checked = 0
        for name, blocks in done["held"].items():
            pod, rank = (int(x) for x in name.split("/"))
            held = {seq: (parent, tokens, lora) for seq, parent, tokens, lora, _ in blocks}
            for seq in held:
                chain = chain_of(held, seq)
                if chain is None:
                    continue
                assert index.find_matches(chain).get((pod, rank)) == len(chain), (name, seq)
                checked += 1
        assert checked > 50
    finally:
        publisher.stdin.close()
        publisher.wait(timeout=60)
