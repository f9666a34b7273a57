"""flash_indexer: the exact KV-cache index of a fleet of LLM inference workers.

A router asks which worker caches the longest prefix of a request; engines' KV events keep the
index current. Workers are ``(worker_id, dp_rank)`` tuples (a bare ``worker_id`` means rank 0);
hashes are unsigned 64-bit integers. Every call that does work releases the GIL.

Bad input raises ValueError and changes nothing; the one exception is a removal naming blocks a
worker does not hold, which removes the others (the contract's warning): ``Index.apply_removed``
returns the unknown ones, ``RadixTree.apply_event`` raises ``UnknownBlocksError``. No input
crashes the interpreter; a bug inside the crate raises RuntimeError, never PanicException.
"""

from typing import Dict, List, Literal, Optional, Sequence, Tuple, Union, final

from typing_extensions import TypeAlias

__all__ = [
    "__version__",
    "Index",
    "Routed",
    "HybridIndex",
    "RadixTree",
    "OverlapScores",
    "Subscriber",
    "UnknownBlocksError",
    "local_hashes",
    "seq_hashes",
    "vllm_block_hashes",
]

__version__: str

# Aliases for the stubs only (not names of the module).
_Worker: TypeAlias = Union[Tuple[int, int], int]
_Scores: TypeAlias = Dict[Tuple[int, int], int]
_MmItem: TypeAlias = Tuple[str, int, int]
_DumpedEvent: TypeAlias = Union[
    Tuple[Literal["stored"], Tuple[int, int], Optional[int], List[Tuple[int, int]]],
    Tuple[Literal["removed"], Tuple[int, int], List[int]],
    Tuple[Literal["cleared"], Tuple[int, int]],
]

def local_hashes(
    tokens: Sequence[int],
    block_size: int,
    salt: Optional[str] = None,
    lora_name: Optional[str] = None,
    cache_salt: Optional[str] = None,
    mm: Optional[Sequence[_MmItem]] = None,
    lookahead: int = 0,
) -> List[int]:
    """Local hashes of the full blocks of ``tokens``, bit-compatible with Dynamo's
    ``compute_block_hash_for_seq`` (``salt`` is Dynamo's cache namespace). A trailing partial
    block is dropped. ``cache_salt`` (vLLM's, a key of the first block) and ``mm`` (multimodal
    items as ``(identifier, offset, length)`` of their placeholder tokens, each a key of every
    block it overlaps) key blocks as vLLM 0.33 keys them; ``lookahead`` is vLLM's
    ``num_hash_lookahead_tokens`` (speculative decoding: each block also keyed by that many
    tokens after it, and only blocks followed by them hashed). Raises ValueError for a
    ``block_size`` outside 1..=2**20 or a ``lookahead`` over 64."""

def seq_hashes(local_hashes: Sequence[int]) -> List[int]:
    """Dynamo's sequence hashes of a chain of local hashes."""

def vllm_block_hashes(
    tokens: Sequence[int], block_size: int, hash_seed: str, lora_name: Optional[str] = None
) -> List[int]:
    """vLLM's block hashes (``sha256_cbor``) of the full blocks of ``tokens``, as its KV events
    publish them (the digest's low 64 bits). ``hash_seed`` is the engine's ``PYTHONHASHSEED``."""

class UnknownBlocksError(RuntimeError):
    """A removal named blocks the worker did not hold: the others were removed (the contract's
    warning, not a refusal). A RuntimeError, as Dynamo's ``RadixTree`` raises for it."""

@final
class Index:
    """The index of a fleet, exact from engines' events; with ``approximate``, also predicted
    from routing decisions for workers that publish no events.

    ``layout``: ``"positional"`` (default), ``"array"`` or ``"radix"``. ``approximate``:
    ``"ttl"`` (predictions live ``ttl_seconds`` after their last routing, default 120) or
    ``"lru"`` (an LRU model of ``capacity_blocks`` per worker, running requests pinned until
    ``release``). A worker's first event makes it exact and drops its predictions.

    ``share="redis://host:port/"`` (approximate mode only): this Index is one of several router
    replicas sharing their routing decisions through the Redis or Valkey stream ``share_key``;
    ``sync(now)`` applies the others' decisions.
    """

    def __new__(
        cls,
        layout: Literal["positional", "array", "radix"] = "positional",
        approximate: Optional[Literal["ttl", "lru"]] = None,
        ttl_seconds: Optional[float] = None,
        capacity_blocks: Optional[int] = None,
        share: Optional[str] = None,
        share_key: str = "flash-indexer:decisions",
    ) -> "Index": ...
    @property
    def layout(self) -> str: ...
    def apply_stored(
        self, worker: _Worker, parent: Optional[int], blocks: Sequence[Tuple[int, int]]
    ) -> None:
        """``worker`` stored ``blocks`` (``(local_hash, seq_hash)`` pairs) after ``parent``.
        Raises ValueError, changing nothing, for an unknown parent, a repeated block or a
        conflicting one."""
    def apply_removed(self, worker: _Worker, seq_hashes: Sequence[int]) -> List[int]:
        """``worker`` evicted ``seq_hashes``; returns those it did not hold (ignored)."""
    def apply_cleared(self, worker: _Worker) -> None:
        """``worker`` (that rank) dropped every block."""
    def apply_engine_batch(
        self, worker_id: int, data: bytes, engine: Literal["vllm", "sglang"] = "vllm"
    ) -> Dict[str, int]:
        """A msgpack batch as a vLLM or SGLang engine publishes it over ZeroMQ. Returns
        ``{"applied", "rejected", "filtered"}`` counts. Raises ValueError for bytes that do not
        decode."""
    def find_matches(self, local_hashes: Sequence[int]) -> _Scores:
        """``{(worker_id, dp_rank): depth}`` for every worker matching the chain."""
    def find_matches_for_tokens(
        self,
        tokens: Sequence[int],
        block_size: int,
        salt: Optional[str] = None,
        lora_name: Optional[str] = None,
        cache_salt: Optional[str] = None,
        mm: Optional[Sequence[_MmItem]] = None,
        lookahead: int = 0,
    ) -> _Scores:
        """``find_matches`` of ``local_hashes(tokens, block_size, ...)`` with the same
        keywords."""
    def best(self, local_hashes: Sequence[int]) -> Optional[Tuple[Tuple[int, int], int]]:
        """The deepest match, ``((worker_id, dp_rank), depth)``, or None."""
    def remove_worker(self, worker_id: int) -> None: ...
    def remove_worker_dp_rank(self, worker: _Worker) -> None: ...
    def block_count(self, worker: _Worker) -> int:
        """Blocks ``worker`` holds, reachable or not."""
    def dump(self) -> List[_DumpedEvent]:
        """Events that rebuild the index's answers."""
    def record_routing(self, worker: _Worker, local_hashes: Sequence[int], now: float) -> Routed:
        """Approximate mode: a request with this prompt went to ``worker`` at ``now`` (seconds).
        Returns the request for ``release``. RuntimeError on an exact Index."""
    def release(self, routed: Routed, now: float) -> None:
        """Approximate mode: the request ``routed`` finished (again: nothing more). ValueError if
        another Index routed it."""
    def expire(self, now: float) -> None:
        """Approximate mode: drop predictions whose time to live has passed."""
    def sync(self, now: float) -> int:
        """Shared mode: apply the other replicas' decisions not applied yet, each at its own
        time; returns how many. ConnectionError if Redis cannot be read (routing goes on)."""
    def share_stats(self) -> Dict[str, int]:
        """Shared mode: ``published``, ``publish_failures``, ``applied``, ``duplicates``,
        ``malformed``, ``unmatched_releases``, ``read_failures`` and ``expired_pins``
        counts."""

@final
class Routed:
    """A request routed in approximate mode; pass it to ``Index.release`` when it finishes."""
    @property
    def worker(self) -> Tuple[int, int]:
        """The worker the request went to, ``(worker_id, dp_rank)``."""

_GroupKind: TypeAlias = Literal[
    "full_attention", "sliding_window", "chunked_local_attention", "mamba"
]
_Group: TypeAlias = Union[Tuple[str, int], Tuple[str, int, int]]

@final
class HybridIndex:
    """The exact index of a fleet serving a model with several KV-cache groups (vLLM's
    ``group_idx``): a worker's score is the longest prefix every group can supply, by vLLM
    0.33's reuse rules.

    ``groups``, indexed by ``group_idx``: ``(kind, block_size)`` or ``(kind, block_size,
    window)``, kinds ``"full_attention"``, ``"sliding_window"`` (window in tokens),
    ``"chunked_local_attention"`` (chunk in tokens), ``"mamba"``. At least one full-attention
    group, one block size for all; anything else raises ValueError.
    """

    def __new__(
        cls,
        groups: Sequence[_Group],
        layout: Literal["positional", "array", "radix"] = "positional",
    ) -> "HybridIndex": ...
    @property
    def layout(self) -> str: ...
    @property
    def groups(self) -> List[Tuple[_GroupKind, int, Optional[int]]]:
        """The groups, ``(kind, block_size, window or chunk or None)``."""
    def apply_stored(
        self, group: int, worker: _Worker, parent: Optional[int], blocks: Sequence[Tuple[int, int]]
    ) -> None:
        """Group ``group`` of ``worker`` stored ``blocks`` after ``parent``. ValueError, changing
        nothing, for an unknown group, parent, repeated block or conflict."""
    def apply_removed(self, group: int, worker: _Worker, seq_hashes: Sequence[int]) -> List[int]:
        """Group ``group`` of ``worker`` evicted ``seq_hashes``; returns those it did not hold."""
    def apply_cleared(self, worker: _Worker) -> None:
        """``worker`` (that rank) dropped every block of every group."""
    def apply_engine_batch(
        self, worker_id: int, data: bytes, engine: Literal["vllm", "sglang"] = "vllm"
    ) -> Dict[str, int]:
        """A msgpack batch as a vLLM engine publishes it, each event to its ``group_idx``.
        Returns ``{"applied", "rejected", "filtered"}`` counts (events of a group the model
        lacks, or of another kind, are rejected). ValueError for bytes that do not decode."""
    def find_matches(self, local_hashes: Sequence[int]) -> _Scores:
        """``{(worker_id, dp_rank): blocks}``: the prefix every group of the worker supplies."""
    def remove_worker(self, worker_id: int) -> None: ...
    def remove_worker_dp_rank(self, worker: _Worker) -> None: ...
    def block_count(self, worker: _Worker, group: int) -> int:
        """Blocks group ``group`` of ``worker`` holds, reachable or not."""
    def dump(self) -> List[Tuple[int, Tuple[int, int], Optional[int], List[Tuple[int, int]]]]:
        """The ``apply_stored`` calls, ``(group, worker, parent, blocks)``, that rebuild the
        index's answers in an empty HybridIndex of the same groups."""

@final
class OverlapScores:
    """``RadixTree.find_matches``'s result, shaped as Dynamo's."""

    @property
    def scores(self) -> Dict[Tuple[int, int], int]: ...
    @property
    def frequencies(self) -> List[int]:
        """Always empty: access frequencies are not tracked."""
    def __len__(self) -> int:
        """How many workers matched."""

@final
class RadixTree:
    """A drop-in for ``dynamo._core.RadixTree``: the same methods, JSON event bytes and result
    shape, over any layout."""

    def __new__(cls, layout: Literal["positional", "array", "radix"] = "positional") -> "RadixTree": ...
    def find_matches(self, sequence: List[int], early_exit: bool = False) -> OverlapScores: ...
    def apply_event(self, worker_id: int, kv_cache_event_bytes: bytes) -> None:
        """Raises ValueError for bytes that are not a KvCacheEvent, RuntimeError for an event
        the index refuses (nothing changed), and ``UnknownBlocksError`` after a removal that
        named blocks the worker did not hold (the others were removed)."""
    def remove_worker(self, worker_id: int) -> None: ...
    def clear_all_blocks(self, worker_id: int) -> None: ...
    def dump_tree_as_events(self) -> List[str]: ...

@final
class Subscriber:
    """ZeroMQ ingest of vLLM/SGLang engines on threads of its own, feeding ``index`` (an
    ``Index``, or a ``HybridIndex``: each event with its ``group_idx``).

    Each engine: ``{"events": "tcp://host:5557", "worker_id": 1}`` with optional ``"replay"``,
    ``"dp_rank"`` and ``"bind"``."""

    def __new__(
        cls,
        index: Union[Index, HybridIndex],
        engines: List[Dict[str, Union[str, int, bool]]],
        engine: Literal["vllm", "sglang"] = "vllm",
    ) -> "Subscriber": ...
    def stats(self) -> Dict[str, Union[int, Optional[str]]]: ...
    def flush(self) -> None:
        """Waits until everything received so far is applied."""
    def close(self) -> None: ...
    def __enter__(self) -> "Subscriber": ...
    def __exit__(
        self, _kind: object, _value: object, _traceback: object
    ) -> None: ...
