"""HybridIndex: a model of several KV-cache groups, each event with its group, scores by vLLM's
reuse rules; from direct calls and from vLLM's msgpack batches."""

import importlib.util
import os
import time

import pytest

import flash_indexer as fi

GPT_OSS_LIKE = [("full_attention", 16), ("sliding_window", 16, 32)]


@pytest.mark.parametrize("layout", ["positional", "array", "radix"])
def test_a_window_group_needs_only_the_blocks_under_its_window(layout):
    index = fi.HybridIndex(GPT_OSS_LIKE, layout=layout)
    assert index.groups == [("full_attention", 16, None), ("sliding_window", 16, 32)]
    locals_ = [101, 102, 103, 104, 105, 106]
    blocks = [(local, 1000 + i) for i, local in enumerate(locals_)]
    w = (3, 0)
    index.apply_stored(0, w, None, blocks)
    index.apply_stored(1, w, None, blocks)
    # The window group evicts what slid out of the window (32 tokens: 2 blocks): the hit stays.
    assert index.apply_removed(1, w, [1000, 1001, 1002]) == []
    assert index.find_matches(locals_) == {w: 6}
    assert index.block_count(w, 0) == 6
    assert index.block_count(w, 1) == 3
    # It evicts the last block too: the longest prefix ending in a whole window is 5 blocks.
    index.apply_removed(1, w, [1005])
    assert index.find_matches(locals_) == {w: 5}
    # And one more: no window anywhere, and the first block is gone, so nothing.
    index.apply_removed(1, w, [1004])
    assert index.find_matches(locals_) == {}
    # The full-attention group alone would have scored 6; a clear drops every group.
    index.apply_cleared(w)
    assert index.block_count(w, 0) == 0 and index.block_count(w, 1) == 0


@pytest.mark.parametrize("layout", ["positional", "array", "radix"])
def test_a_dump_rebuilds_every_group(layout):
    index = fi.HybridIndex(GPT_OSS_LIKE, layout=layout)
    locals_ = [101, 102, 103, 104, 105, 106]
    blocks = [(local, 1000 + i) for i, local in enumerate(locals_)]
    w = (3, 1)
    index.apply_stored(0, w, None, blocks)
    index.apply_stored(1, w, None, blocks)
    index.apply_removed(1, w, [1000, 1001, 1002, 1005])
    assert index.find_matches(locals_) == {w: 5}
    copy = fi.HybridIndex(GPT_OSS_LIKE, layout=layout)
    for group, worker, parent, stored in index.dump():
        copy.apply_stored(group, worker, parent, stored)
    # The window group's evictions came along: only 5 blocks, and 3 need an earlier window.
    for n in range(len(locals_) + 1):
        assert copy.find_matches(locals_[:n]) == index.find_matches(locals_[:n]), n
    assert copy.block_count(w, 1) == 2


def test_bad_models_and_bad_events_raise_value_error_and_change_nothing():
    with pytest.raises(ValueError, match="full-attention"):
        fi.HybridIndex([("mamba", 16)])
    with pytest.raises(ValueError, match="window"):
        fi.HybridIndex([("full_attention", 16), ("sliding_window", 16)])
    with pytest.raises(ValueError, match="no reuse rule"):
        fi.HybridIndex([("full_attention", 16), ("cross_attention", 16)])
    with pytest.raises(ValueError, match="block_size"):
        fi.HybridIndex([("full_attention",)])
    with pytest.raises(ValueError):
        fi.HybridIndex([("full_attention", 16), ("mamba", 32)])
    with pytest.raises(ValueError, match="layout"):
        fi.HybridIndex(GPT_OSS_LIKE, layout="btree")
    index = fi.HybridIndex(GPT_OSS_LIKE)
    with pytest.raises(ValueError, match="group"):
        index.apply_stored(2, 1, None, [(1, 2)])
    with pytest.raises(ValueError, match="group"):
        index.block_count(1, 7)
    assert index.find_matches([1]) == {}


def load_publisher():
    """The repository's stand-in for vLLM engines, as a module (its event structs and encoder)."""
    pytest.importorskip("msgspec")
    pytest.importorskip("zmq")
    spec = importlib.util.spec_from_file_location(
        "vllm_publisher",
        os.path.join(os.path.dirname(__file__), "..", "..", "tests", "publisher", "vllm_publisher.py"),
    )
    publisher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(publisher)
    return publisher


@pytest.mark.parametrize("use_map", [False, True])
def test_vllm_batches_go_to_their_groups(use_map):
    publisher = load_publisher()

    # Qwen3-Next-like: full attention (group 0) and Mamba (group 1), blocks of 16 tokens.
    index = fi.HybridIndex([("full_attention", 16), ("mamba", 16)])
    tokens = list(range(500, 500 + 4 * 16))
    digests = fi.vllm_block_hashes(tokens, 16, "42")
    full = publisher.BlockStored(digests, None, tokens, 16, None, "GPU", None, group_idx=0)
    # The Mamba group keeps the state after the third block only.
    state = publisher.BlockStored(
        [digests[2]], digests[1], tokens[32:48], 16, None, "GPU", None, group_idx=1
    )
    # A group the model does not have: refused and counted, never merged.
    stray = publisher.BlockStored([digests[3]], digests[2], tokens[48:], 16, None, "GPU", None, group_idx=5)
    counts = index.apply_engine_batch(9, publisher.encode([full, state, stray], 0, use_map))
    assert counts == {"applied": 2, "rejected": 1, "filtered": 0}
    assert index.find_matches(fi.local_hashes(tokens, 16)) == {(9, 0): 3}


def test_a_subscriber_feeds_a_hybrid_index_each_event_to_its_group():
    publisher = load_publisher()
    import zmq

    # gpt-oss-like: full attention (group 0) and a window of 32 tokens (group 1), blocks of 16.
    index = fi.HybridIndex([("full_attention", 16), ("sliding_window", 16, 32)], layout="radix")
    tokens = list(range(900, 900 + 6 * 16))
    digests = fi.vllm_block_hashes(tokens, 16, "42")
    full = publisher.BlockStored(digests, None, tokens, 16, None, "GPU", None, group_idx=0)
    window = publisher.BlockStored(digests, None, tokens, 16, None, "GPU", None, group_idx=1)
    slid_out = publisher.BlockRemoved(digests[:3], "GPU", group_idx=1)
    query = fi.local_hashes(tokens, 16)
    context = zmq.Context()
    socket = context.socket(zmq.PUB)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    sent = 0

    def publish(events):
        nonlocal sent
        socket.send_multipart([b"", sent.to_bytes(8, "big"), publisher.encode(events, 0, False)])
        sent += 1

    try:
        with fi.Subscriber(index, [{"events": f"tcp://127.0.0.1:{port}", "worker_id": 4}]) as subscriber:
            # A PUB socket drops what it sends before the subscription is up: publish until seen.
            for _ in range(500):
                publish([full, window])
                time.sleep(0.02)
                if index.find_matches(query) == {(4, 0): 6}:
                    break
            assert index.find_matches(query) == {(4, 0): 6}
            batches = subscriber.stats()["batches"]
            publish([slid_out])
            for _ in range(500):
                subscriber.flush()
                if subscriber.stats()["batches"] > batches:
                    break
                time.sleep(0.01)
            stats = subscriber.stats()
        assert stats["decode_errors"] == 0 and stats["index_refused"] == 0, stats
        # The window group slid past blocks 0..3: the whole prompt and 5 blocks still have their
        # window of two blocks; 4 blocks do not (block 2 is gone).
        assert index.find_matches(query) == {(4, 0): 6}
        assert index.find_matches(query[:5]) == {(4, 0): 5}
        assert index.find_matches(query[:4]) == {}
        assert index.block_count(4, 1) == 3
    finally:
        socket.close()
        context.term()


def test_a_subscriber_takes_an_index_or_a_hybrid_index_only():
    with pytest.raises(TypeError, match="HybridIndex"):
        fi.Subscriber(object(), [{"events": "tcp://127.0.0.1:1", "worker_id": 1}])
