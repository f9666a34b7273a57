"""RadixTree as a drop-in for dynamo._core.RadixTree: the same calls give the same answers and
the same exceptions. Against Dynamo's own when ai-dynamo-runtime is installed (CI installs it);
the contract's model otherwise.

Generated sequences stay where the two contracts agree: blocks are removed tail first (a removed
block with held descendants, re-stored, revives them here but not in Dynamo's tree, as the
README says), and every store continues a block its worker holds."""

import json
import random

import pytest

import flash_indexer as fi
from model import Model

try:
    from dynamo._core import RadixTree as DynamoRadixTree
except ImportError:  # pragma: no cover - CI installs it
    DynamoRadixTree = None

LAYOUTS = ["positional", "array", "radix"]


def stored(event_id, parent, blocks, dp_rank=0):
    data = {
        "stored": {
            "parent_hash": parent,
            "blocks": [{"block_hash": seq, "tokens_hash": local} for local, seq in blocks],
        }
    }
    return json.dumps({"event_id": event_id, "data": data, "dp_rank": dp_rank}).encode()


def removed(event_id, seqs, dp_rank=0):
    data = {"removed": {"block_hashes": seqs}}
    return json.dumps({"event_id": event_id, "data": data, "dp_rank": dp_rank}).encode()


def cleared(event_id, dp_rank=0):
    return json.dumps({"event_id": event_id, "data": "cleared", "dp_rank": dp_rank}).encode()


def scenario(seed):
    """Events (worker_id, bytes) and queries: chains over a small alphabet, tails evicted."""
    rng = random.Random(seed)
    chains = {}  # (worker_id, rank) -> list of (local, seq), the chain it holds
    events, queries = [], []
    for event_id in range(300):
        worker = (rng.randrange(4), rng.randrange(2))
        chain = chains.setdefault(worker, [])
        roll = rng.random()
        if roll < 0.55:
            extra = [rng.randrange(3) for _ in range(rng.randrange(1, 6))]
            locals_ = [local for local, _ in chain] + extra
            seqs = fi.seq_hashes(locals_)
            new = list(zip(locals_, seqs))[len(chain):]
            parent = chain[-1][1] if chain else None
            events.append((worker[0], stored(event_id, parent, new, worker[1])))
            chain.extend(new)
            queries.append(locals_)
        elif roll < 0.9 and chain:
            k = rng.randrange(1, len(chain) + 1)
            tail = [seq for _, seq in chain[-k:]][::-1]
            del chain[-k:]
            events.append((worker[0], removed(event_id, tail, worker[1])))
        else:
            chain.clear()
            events.append((worker[0], cleared(event_id, worker[1])))
        queries.append([rng.randrange(3) for _ in range(rng.randrange(1, 12))])
    return events, queries[-60:]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", range(6))
def test_answers_as_dynamos_radix_tree(layout, seed):
    events, queries = scenario(seed)
    ours = fi.RadixTree(layout)
    theirs = DynamoRadixTree() if DynamoRadixTree else None
    for worker_id, data in events:
        ours.apply_event(worker_id, data)
        if theirs:
            theirs.apply_event(worker_id, data)
    for query in queries:
        got = ours.find_matches(query)
        assert got.frequencies == []
        if theirs:
            assert got.scores == dict(theirs.find_matches(query).scores), query
    # The dump rebuilds the same answers.
    rebuilt = fi.RadixTree(layout)
    for line in ours.dump_tree_as_events():
        router_event = json.loads(line)
        rebuilt.apply_event(router_event["worker_id"], json.dumps(router_event["event"]).encode())
    for query in queries:
        assert rebuilt.find_matches(query).scores == ours.find_matches(query).scores


def test_scores_match_the_contract_model_too():
    events, queries = scenario(99)
    ours, model = fi.RadixTree(), Model()
    for worker_id, data in events:
        ours.apply_event(worker_id, data)
        event = json.loads(data)
        worker = (worker_id, event["dp_rank"])
        if event["data"] == "cleared":
            model.cleared(worker)
        elif "stored" in event["data"]:
            s = event["data"]["stored"]
            model.stored(worker, s["parent_hash"], [(b["tokens_hash"], b["block_hash"]) for b in s["blocks"]])
        else:
            model.removed(worker, event["data"]["removed"]["block_hashes"])
    for query in queries:
        assert ours.find_matches(query).scores == model.find_matches(query)


def test_errors_are_dynamos_exception_types():
    trees = [fi.RadixTree()] + ([DynamoRadixTree()] if DynamoRadixTree else [])
    for tree in trees:
        with pytest.raises(ValueError):
            tree.apply_event(1, b"not json")
        with pytest.raises(RuntimeError):
            tree.apply_event(1, stored(0, 12345, [(1, 2)]))  # unknown parent
        with pytest.raises(RuntimeError):
            tree.apply_event(1, removed(1, [777]))  # unknown block
        tree.apply_event(1, stored(2, None, [(5, 50)], dp_rank=1))
        tree.clear_all_blocks(1)
        assert dict(tree.find_matches([5]).scores) == {}
        tree.apply_event(3, stored(3, None, [(5, 50)]))
        tree.remove_worker(3)
        assert dict(tree.find_matches([5]).scores) == {}
