"""vllm_block_hashes against block hashes a real vLLM server published (shared/testdata/vllm,
beside the repository: Qwen3-0.6B, block size 16, PYTHONHASHSEED=42, sha256_cbor), with and
without a LoRA adapter; and the engine's hashes index exactly."""

import json
import os

import pytest

import flash_indexer as fi

TESTDATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "testdata", "vllm")


def load(name):
    path = os.path.join(TESTDATA, name)
    if not os.path.exists(path):
        pytest.skip(f"{path}: the project's shared test data is not beside the repository")
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("name, lora", [("kv_event_base.json", None), ("kv_event_lora.json", "Alice")])
def test_vllm_hashes_match_a_real_server(name, lora):
    event = load(name)
    hashes = fi.vllm_block_hashes(event["token_ids"], event["block_size"], event["hash_seed"], lora_name=lora)
    assert hashes == event["block_hashes"]
    # The engine's hashes index as published; a router finds them from the tokens.
    index = fi.Index()
    locals_ = fi.local_hashes(event["token_ids"], event["block_size"], lora_name=lora)
    index.apply_stored((1, 0), None, list(zip(locals_, hashes)))
    assert index.find_matches_for_tokens(event["token_ids"], 16, lora_name=lora) == {(1, 0): len(hashes)}


def test_vllm_hashes_of_another_seed_differ():
    event = load("kv_event_base.json")
    assert fi.vllm_block_hashes(event["token_ids"], 16, "43") != event["block_hashes"]
    with pytest.raises(ValueError):
        fi.vllm_block_hashes([1], 0, "42")
