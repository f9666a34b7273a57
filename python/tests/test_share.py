"""Router replicas sharing approximate-mode decisions through a real redis-server on loopback
(started here; skipped without one, except under CI)."""

import os
import shutil
import socket
import subprocess
import time

import flash_indexer as fi
import pytest


@pytest.fixture
def redis_url():
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs redis-server")
        pytest.skip("no redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not listen"
            time.sleep(0.02)
    yield f"redis://127.0.0.1:{port}/"
    server.kill()
    server.wait()


def test_replicas_see_each_others_decisions(redis_url):
    a = fi.Index(approximate="lru", capacity_blocks=64, share=redis_url, share_key="k")
    b = fi.Index(approximate="lru", capacity_blocks=64, share=redis_url, share_key="k")
    prompt = fi.local_hashes(list(range(256)), 64)
    routed = a.record_routing((3, 0), prompt, now=1.0)
    assert b.best(prompt) is None
    assert b.sync(1.0) == 1
    assert b.best(prompt) == ((3, 0), 4)
    a.release(routed, 2.0)
    assert b.sync(2.0) == 1
    assert a.sync(2.0) == 0  # its own entries are skipped
    assert b.share_stats()["applied"] == 2
    assert a.share_stats()["published"] == 2
    assert "share_key=\"k\"" in repr(a)


def test_a_replica_without_redis_keeps_routing():
    # Nothing listens on port 1: every publish and read fails, and is counted.
    a = fi.Index(approximate="ttl", share="redis://127.0.0.1:1/")
    prompt = fi.local_hashes(list(range(128)), 64)
    a.record_routing(1, prompt, 1.0)
    assert a.best(prompt) == ((1, 0), 2)
    with pytest.raises(ConnectionError):
        a.sync(1.0)
    stats = a.share_stats()
    assert (stats["publish_failures"], stats["read_failures"]) == (1, 1)


def test_sharing_needs_approximate_mode_and_a_redis_url():
    with pytest.raises(ValueError, match="approximate"):
        fi.Index(share="redis://127.0.0.1:6379/")
    with pytest.raises(ValueError):
        fi.Index(approximate="ttl", share="http://nowhere")
    with pytest.raises(RuntimeError, match="share"):
        fi.Index(approximate="ttl").sync(0.0)
