"""Inputs that once killed the interpreter or escaped as PanicException (issue 54). Each call
runs in a child interpreter under an 8 GiB address-space limit, where a reservation of 16 GiB
fails and aborts the process, and must end in an ordinary exception (or a clean answer)."""

import subprocess
import sys
import textwrap

import pytest

msgspec = pytest.importorskip("msgspec")

LIMIT = 8 << 30


def run_limited(body):
    """Runs `body` in a child interpreter whose address space is capped at 8 GiB; returns its
    stdout. A crash (a signal, or pyo3's PanicException) fails the test."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))
        import flash_indexer as fi
        import msgspec
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr)
    assert "PanicException" not in child.stderr, child.stderr
    return child.stdout


def expect_clean(call, exception):
    """Child code that runs `call` and prints the name of the exception it raised."""
    return f"""
    try:
        {call}
        print("no exception")
    except {exception} as error:
        print(type(error).__name__, error)
    """


@pytest.mark.parametrize("block_size", [2**32, 2**33, 2**61])
def test_a_huge_block_size_is_a_value_error(block_size):
    for call in [
        f"fi.local_hashes([1, 2, 3], {block_size})",
        f"fi.Index().find_matches_for_tokens([1, 2, 3], {block_size})",
        f"fi.vllm_block_hashes([1, 2, 3], {block_size}, '0')",
    ]:
        out = run_limited(expect_clean(call, "ValueError"))
        assert out.startswith("ValueError block_size must be 1 to 1048576"), (call, out)


@pytest.mark.parametrize("use_map", [False, True])
def test_an_engine_event_with_an_absurd_block_size_is_rejected_and_counted(use_map):
    out = run_limited(
        f"""
        event = ["BlockStored", [], None, [], 2**32 - 1, None, "GPU"]
        if {use_map}:
            names = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"]
            event = dict(zip(["type"] + names, event))
            batch = {{"ts": 0.0, "events": [event]}}
        else:
            batch = [0.0, [event], None]
        index = fi.Index()
        print(index.apply_engine_batch(1, msgspec.msgpack.encode(batch)))
        """
    )
    assert out.strip() == "{'applied': 0, 'rejected': 1, 'filtered': 0}"


@pytest.mark.parametrize("key", ["events", "replay"])
def test_a_nul_byte_in_an_endpoint_is_a_value_error(key):
    engine = {"events": "tcp://127.0.0.1:5557", "worker_id": 1}
    engine[key] = "tcp://127.0.0.1:5557\x00"
    out = run_limited(expect_clean(f"fi.Subscriber(fi.Index(), [{engine!r}])", "ValueError"))
    assert out.startswith("ValueError") and "NUL" in out, out


def test_a_removal_naming_an_unknown_block_removes_the_rest_and_says_so():
    import json

    import flash_indexer as fi

    def event(data):
        return json.dumps({"event_id": 1, "data": data, "dp_rank": 0}).encode()

    tree = fi.RadixTree()
    stored = {"parent_hash": None, "blocks": [{"block_hash": 50, "tokens_hash": 5}]}
    tree.apply_event(1, event({"stored": stored}))
    with pytest.raises(fi.UnknownBlocksError) as raised:
        tree.apply_event(1, event({"removed": {"block_hashes": [50, 777]}}))
    # A RuntimeError, as Dynamo's RadixTree raises; the held block is gone all the same.
    assert isinstance(raised.value, RuntimeError)
    assert "other blocks were removed" in str(raised.value)
    assert dict(tree.find_matches([5]).scores) == {}
    # Index reports the same warning as a return value, never an exception.
    index = fi.Index()
    index.apply_stored(1, None, [(5, 50)])
    assert index.apply_removed(1, [50, 777]) == [777]
    assert index.find_matches([5]) == {}
