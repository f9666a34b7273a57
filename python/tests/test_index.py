"""Index against the contract's literal model on generated event sequences, every layout; the
hash helpers against the contract's vectors; approximate mode; bad input."""

import random

import pytest

import flash_indexer as fi
from model import Model, Rejected

LAYOUTS = ["positional", "array", "radix"]


def chain_blocks(rng, locals_, salt):
    """(local, seq) pairs of a chain, with seq hashes drawn from a small pool so that they
    collide and conflict often."""
    return [(l, rng.choice([fi.seq_hashes(locals_[: i + 1])[-1] ^ salt, rng.randrange(40)])) for i, l in enumerate(locals_)]


def random_step(rng, workers, seen):
    worker = rng.choice(workers)
    roll = rng.random()
    if roll < 0.5:
        locals_ = [rng.randrange(4) for _ in range(rng.randrange(0, 9))]
        blocks = chain_blocks(rng, locals_, worker[0])
        parent = None
        if rng.random() < 0.4:
            parent = rng.choice(seen) if seen else rng.randrange(40)
        return ("stored", worker, parent, blocks)
    if roll < 0.8:
        pool = seen or [0]
        return ("removed", worker, [rng.choice(pool) for _ in range(rng.randrange(1, 4))])
    if roll < 0.87:
        return ("cleared", worker)
    if roll < 0.92:
        return ("remove_worker", worker[0])
    return ("query",)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", range(12))
def test_index_agrees_with_the_model(layout, seed):
    rng = random.Random(seed)
    index, model = fi.Index(layout), Model()
    workers = [(w, r) for w in range(3) for r in range(2)]
    seen, queries = [], [[rng.randrange(4) for _ in range(rng.randrange(1, 10))] for _ in range(24)]
    for step_number in range(250):
        step = random_step(rng, workers, seen)
        kind = step[0]
        if kind == "stored":
            _, worker, parent, blocks = step
            seen.extend(seq for _, seq in blocks)
            try:
                model.stored(worker, parent, blocks)
                expected = None
            except Rejected as why:
                expected = why
            if expected is None:
                index.apply_stored(worker, parent, blocks)
            else:
                with pytest.raises(ValueError):
                    index.apply_stored(worker, parent, blocks)
        elif kind == "removed":
            _, worker, seqs = step
            assert index.apply_removed(worker, seqs) == model.removed(worker, seqs)
        elif kind == "cleared":
            index.apply_cleared(step[1])
            model.cleared(step[1])
        elif kind == "remove_worker":
            index.remove_worker(step[1])
            model.remove_worker(step[1])
        for query in queries:
            assert index.find_matches(query) == model.find_matches(query), (step_number, step, query)
    # The dump rebuilds the answers.
    rebuilt = fi.Index(layout)
    for event in index.dump():
        if event[0] == "stored":
            rebuilt.apply_stored(event[1], event[2], event[3])
        elif event[0] == "removed":
            rebuilt.apply_removed(event[1], event[2])
        else:
            rebuilt.apply_cleared(event[1])
    for query in queries:
        assert rebuilt.find_matches(query) == model.find_matches(query)


def test_hashes_are_the_contracts():
    locals_ = fi.local_hashes(list(range(1, 49)), 16)
    assert locals_ == [16863443419780771464, 2287610619914608821, 12129935312930971799]
    assert fi.seq_hashes(locals_) == [16863443419780771464, 12466389667045779788, 960926348267535642]
    assert fi.local_hashes(list(range(1, 49)), 16, lora_name="my-lora")[0] == 4148081000444450790
    # Dynamo's hasher gives this for cache namespace "tenant-a" (flashbench/tests/dynamo_hashes.rs).
    assert fi.local_hashes(list(range(1, 49)), 16, salt="tenant-a")[0] == 8175209796170318505
    assert fi.local_hashes(list(range(1, 50)), 16) == locals_  # a partial block is dropped


def test_tokens_best_and_counts():
    index = fi.Index()
    tokens = list(range(100))
    locals_ = fi.local_hashes(tokens, 16)
    index.apply_stored((7, 1), None, list(zip(locals_, fi.seq_hashes(locals_))))
    assert index.find_matches_for_tokens(tokens, 16) == {(7, 1): 6}
    assert index.find_matches_for_tokens(tokens, 16, salt="other") == {}
    assert index.best(locals_[:3]) == ((7, 1), 3)
    assert index.best([123]) is None
    assert index.block_count((7, 1)) == 6
    index.remove_worker_dp_rank((7, 1))
    assert index.find_matches(locals_) == {}


def test_approximate_mode_predicts_and_expires():
    index = fi.Index(approximate="ttl", ttl_seconds=10)
    prompt = fi.local_hashes(list(range(64)), 16)
    index.record_routing((1, 0), prompt, now=100.0)
    assert index.find_matches(prompt) == {(1, 0): 4}
    index.expire(109.9)
    assert index.find_matches(prompt) == {(1, 0): 4}
    index.expire(110.0)
    assert index.find_matches(prompt) == {}

    lru = fi.Index("radix", approximate="lru", capacity_blocks=4)
    routed = lru.record_routing(2, prompt, 0.0)
    assert routed.worker == (2, 0)
    other = fi.local_hashes(list(range(1000, 1064)), 16)
    lru.record_routing(2, other, 1.0)  # all of worker 2's room is pinned by the first request
    assert lru.find_matches(other) == {}
    lru.release(routed, 2.0)
    lru.release(routed, 2.5)  # again: nothing more
    # Another index's request is refused: it must not unpin this index's request of that number.
    other_index = fi.Index("radix", approximate="lru", capacity_blocks=4)
    with pytest.raises(ValueError, match="another"):
        other_index.release(routed, 2.6)
    lru.record_routing(2, other, 3.0)
    assert lru.find_matches(other) == {(2, 0): 4}


def test_bad_input_raises_and_changes_nothing():
    index = fi.Index()
    index.apply_stored(1, None, [(10, 100)])
    with pytest.raises(ValueError, match="parent"):
        index.apply_stored(1, 999, [(11, 101)])
    with pytest.raises(ValueError):
        index.apply_stored(1, None, [(11, 101), (12, 101)])
    with pytest.raises(ValueError):
        index.apply_stored(1, None, [(99, 100)])  # conflict: same seq, another local hash
    assert index.find_matches([10, 11]) == {(1, 0): 1}
    for call in [
        lambda: index.apply_stored((1, 2, 3), None, []),
        lambda: index.apply_stored("x", None, []),
        lambda: fi.Index("nope"),
        lambda: fi.Index(approximate="lru"),
        lambda: fi.Index(ttl_seconds=3),
        lambda: fi.local_hashes([1, 2], 0),
        lambda: index.apply_engine_batch(1, b"\x00garbage"),
        lambda: index.apply_engine_batch(1, b"", engine="trt"),
        lambda: fi.Index(approximate="ttl").record_routing(1, [1], -1.0),
    ]:
        with pytest.raises(ValueError):
            call()
    with pytest.raises(OverflowError):
        index.find_matches([-1])
    with pytest.raises(TypeError):
        index.find_matches("abc")
    with pytest.raises(RuntimeError):
        index.record_routing(1, [1], 0.0)
    assert index.find_matches([10]) == {(1, 0): 1}
