"""apply_engine_batch takes vLLM's msgpack batches exactly as its publisher sends them (the
repository's stand-in declares vLLM's structs), in both encodings, and indexes them as the
published blocks say."""

import importlib.util
import os

import pytest

import flash_indexer as fi

msgspec = pytest.importorskip("msgspec")
pytest.importorskip("zmq")

spec = importlib.util.spec_from_file_location(
    "vllm_publisher", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "publisher", "vllm_publisher.py")
)
publisher = importlib.util.module_from_spec(spec)
spec.loader.exec_module(publisher)


def batch(events, rank, use_map):
    return publisher.encode(events, rank, use_map=use_map)


@pytest.mark.parametrize("use_map", [False, True])
def test_engine_batches_index_their_blocks(use_map):
    tokens = list(range(1000, 1000 + 4 * 16))
    digests = fi.vllm_block_hashes(tokens, 16, "42")
    stored = publisher.BlockStored(digests, None, tokens, 16, None, "GPU", None)
    index = fi.Index()
    counts = index.apply_engine_batch(7, batch([stored], 1, use_map))
    assert counts == {"applied": 1, "rejected": 0, "filtered": 0}
    assert index.find_matches_for_tokens(tokens, 16) == {(7, 1): 4}
    # The tail block evicted, then a CPU-tier store, which the index filters out.
    removed = publisher.BlockRemoved([digests[-1]], "GPU")
    cpu = publisher.BlockStored([12345], None, list(range(16)), 16, None, "CPU", None)
    counts = index.apply_engine_batch(7, batch([removed, cpu], 1, use_map))
    assert counts == {"applied": 1, "rejected": 0, "filtered": 1}
    assert index.find_matches_for_tokens(tokens, 16) == {(7, 1): 3}
    # Tokens that are not whole blocks are rejected, nothing else is lost.
    partial = publisher.BlockStored([999], digests[0], list(range(5)), 16, None, "GPU", None)
    counts = index.apply_engine_batch(7, batch([partial, publisher.AllBlocksCleared()], 1, use_map))
    assert counts == {"applied": 1, "rejected": 1, "filtered": 0}
    assert index.find_matches_for_tokens(tokens, 16) == {}


@pytest.mark.parametrize("use_map", [False, True])
def test_multimodal_and_salted_blocks_match_only_their_own_features(use_map):
    # vLLM 0.33's extra_keys, one entry per block, untagged (`to_event_extra_keys`): an image
    # whose 24 placeholders start at token 20 keys blocks 1 and 2; a cache salt keys block 0.
    tokens = list(range(2000, 2000 + 4 * 16))
    image = ("image-a", 20, 24)
    image_keys = [None, (("image-a", 4),), (("image-a", -12),), None]
    stored = publisher.BlockStored([1, 2, 3, 4], None, tokens, 16, None, "GPU", None, extra_keys=image_keys)
    salted_keys = [("tenant-x",), None, None, None]
    salted = publisher.BlockStored([11, 12, 13, 14], None, tokens, 16, None, "GPU", None, extra_keys=salted_keys)
    index = fi.Index()
    assert index.apply_engine_batch(1, batch([stored], 0, use_map))["applied"] == 1
    assert index.apply_engine_batch(2, batch([salted], 0, use_map))["applied"] == 1

    def scores(**features):
        return index.find_matches_for_tokens(tokens, 16, **features)

    # The same image: every block of worker 1; no salt, so worker 2 not at all.
    assert scores(mm=[image]) == {(1, 0): 4}
    # Another image with the same placeholders: only the block before the first keyed one.
    assert scores(mm=[("image-b", 20, 24)]) == {(1, 0): 1}
    # The same image one token later: the same blocks, keyed with another offset.
    assert scores(mm=[("image-a", 21, 24)]) == {(1, 0): 1}
    # The same salt: every block of worker 2; another salt: nothing of it.
    assert scores(cache_salt="tenant-x") == {(2, 0): 4}
    assert scores(cache_salt="tenant-y") == {}
    # No features: worker 1 up to its first keyed block, worker 2 not at all (block 0 is salted).
    assert scores() == {(1, 0): 1}
    assert fi.local_hashes(tokens, 16, mm=[image])[0] == fi.local_hashes(tokens, 16)[0]


@pytest.mark.parametrize("use_map", [False, True])
def test_blocks_hashed_over_lookahead_tokens_match_requests_hashed_the_same_way(use_map):
    # vLLM 0.33 with an EAGLE drafter (`num_hash_lookahead_tokens` = 1) hashes each block over
    # the token after it and publishes those tokens in `lookahead_token_ids`, one list per block.
    request = list(range(3000, 3000 + 3 * 16 + 1))
    tokens = request[: 3 * 16]
    lookahead = [[request[16]], [request[32]], [request[48]]]
    stored = publisher.BlockStored(
        [1, 2, 3], None, tokens, 16, None, "GPU", None, lookahead_token_ids=lookahead
    )
    index = fi.Index()
    assert index.apply_engine_batch(1, batch([stored], 0, use_map))["applied"] == 1
    # The request hashed with the same lookahead: every block.
    assert index.find_matches_for_tokens(request, 16, lookahead=1) == {(1, 0): 3}
    # Without the token after block 2, neither vLLM nor the router can hash that block.
    assert index.find_matches_for_tokens(tokens, 16, lookahead=1) == {(1, 0): 2}
    # Another token after block 2 is another block to vLLM.
    assert index.find_matches_for_tokens(tokens + [7], 16, lookahead=1) == {(1, 0): 2}
    # Hashed without lookahead, nothing matches: an under-count, never an over-count.
    assert index.find_matches_for_tokens(request, 16) == {}
    assert len(fi.local_hashes(request, 16, lookahead=1)) == 3
    with pytest.raises(ValueError, match="lookahead"):
        fi.local_hashes(request, 16, lookahead=65)
    # Lists that are not one per block reject the event.
    short = publisher.BlockStored(
        [1, 2, 3], None, tokens, 16, None, "GPU", None, lookahead_token_ids=lookahead[:2]
    )
    counts = fi.Index().apply_engine_batch(1, batch([short], 0, use_map))
    assert counts == {"applied": 0, "rejected": 1, "filtered": 0}


def test_an_extra_key_of_an_unknown_shape_rejects_its_event():
    tokens = list(range(32))
    for keys in [[(1.5,), None], [(("image", "not an offset"),), None], [None]]:
        stored = publisher.BlockStored([1, 2], None, tokens, 16, None, "GPU", None, extra_keys=keys)
        index = fi.Index()
        counts = index.apply_engine_batch(1, batch([stored], 0, False))
        assert counts == {"applied": 0, "rejected": 1, "filtered": 0}, keys
        assert index.find_matches_for_tokens(tokens, 16) == {}
