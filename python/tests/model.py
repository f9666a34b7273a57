"""The contract (SPEC.md) written literally in Python: each worker's held blocks as
``seq -> (local, parent)``, queries walking the chains position by position."""


class Rejected(Exception):
    """The model refused the event (nothing changed)."""


class Model:
    def __init__(self):
        self.held = {}  # (worker_id, dp_rank) -> {seq: (local, parent)}

    def stored(self, worker, parent, blocks):
        if not blocks:
            return  # a store of no blocks is a no-op, whatever its parent
        held = self.held.setdefault(worker, {})
        if parent is not None and parent not in held:
            raise Rejected("unknown parent")
        seqs = [seq for _, seq in blocks]
        if len(set(seqs)) != len(seqs) or parent in seqs:
            raise Rejected("invalid sequence")
        previous = parent
        for local, seq in blocks:
            if seq in held and held[seq] != (local, previous):
                raise Rejected("conflict")
            previous = seq
        previous = parent
        for local, seq in blocks:
            held[seq] = (local, previous)
            previous = seq

    def removed(self, worker, seqs):
        held = self.held.get(worker, {})
        missing = []
        for seq in seqs:
            if seq in held:
                del held[seq]
            else:
                missing.append(seq)
        return missing

    def cleared(self, worker):
        self.held.pop(worker, None)

    def remove_worker(self, worker_id):
        for worker in [w for w in self.held if w[0] == worker_id]:
            del self.held[worker]

    def find_matches(self, query):
        scores = {}
        for worker, held in self.held.items():
            frontier, depth = {None}, 0
            for local in query:
                frontier = {s for s, (l, p) in held.items() if l == local and p in frontier}
                if not frontier:
                    break
                depth += 1
            if depth:
                scores[worker] = depth
        return scores
