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
