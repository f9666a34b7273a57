"""Queries from several Python threads while another thread applies events: the GIL is released
in every call that works, so they run in parallel, and the answers at the end are exact."""

import threading

import flash_indexer as fi


def test_queries_in_threads_while_events_apply():
    index = fi.Index("positional")
    prefix = fi.local_hashes(list(range(64 * 16)), 16)  # 64 shared blocks
    errors, done = [], threading.Event()

    def writer():
        try:
            for w in range(32):
                tail = fi.local_hashes(list(range(10_000 * (w + 1), 10_000 * (w + 1) + 256)), 16)
                locals_ = prefix + tail
                seqs = [s ^ w for s in fi.seq_hashes(locals_)]
                index.apply_stored((w, 0), None, list(zip(locals_, seqs)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    def reader():
        try:
            while not done.is_set():
                for worker, depth in index.find_matches(prefix).items():
                    # No phantom: a worker scores the whole prefix or, mid-store, part of it.
                    assert 0 < depth <= 64, (worker, depth)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert index.find_matches(prefix) == {(w, 0): 64 for w in range(32)}
