#!/usr/bin/env python3
"""A stand-in for vLLM engines publishing KV events, for flash-indexer's end-to-end test and its
router example. Needs `pip install pyzmq msgspec`.

Each pod is one engine with two data-parallel ranks and a small prefix cache. It publishes vLLM's
KV event batches the way vLLM does: msgspec structs declared with vLLM's field order and options,
three-frame messages [topic, seq as 8-byte big-endian, payload] on a PUB-compatible socket, and a
ROUTER replay socket answering [b"", start_seq] with the buffered batches and an end marker
(seq -1, empty payload). Batches alternate between vLLM's two encodings (positional arrays and
"type"-tagged maps); block hashes are sent as 32-byte digests, unsigned ints or signed ints.

Options make the faults the subscriber must survive: --gap-every/--gap-len drop live messages
(kept for replay), --restart-at restarts every odd pod's engine (new sockets on the same
addresses, sequence numbers from 0, empty cache; --restart-down keeps it down that long, and
--restart-advance has it publish that many batches before it binds, as vLLM does while its model
loads), --features P gives that share of requests an image or a cache salt (vLLM 0.33's per-block
extra_keys, folded into the block's hash), --buffer bounds the replay buffer (vLLM's default: 10,000 batches), --no-replay leaves the
replay socket out (vLLM's default), --topic empty publishes vLLM's default topic "", --connect
dials a router that binds (llm-d's deployment), --ipc binds ipc:// sockets, --no-wait publishes
without waiting for a subscriber (a router that starts later).

Protocol with the test (stdout, one JSON object per line):
  {"pods": [{"topic", "events", "replay"}, ...], "sample_query": [...]}   once bound
  {"done": {"batches": N, "time": unix_seconds, "blocks": {"<pod>/<rank>": count, ...},
            "held": {"<pod>/<rank>": [[seq, parent, tokens, lora, extra_keys], ...]}}} once all is published
"held" is every block each rank's cache holds at the end, hashes as vLLM's low 64 bits.
It then keeps answering replay requests until stdin closes (or --serve-seconds pass).
With --log FILE it writes every batch published, as JSON lines.
"""

import argparse
import collections
import hashlib
import json
import random
import select
import sys
import time
from typing import Any

import msgspec
import zmq

BLOCK_SIZE = 16


# vLLM's declarations (vllm/distributed/kv_events.py): same field order, same options.
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base class for all KV cache-related events."""


class BlockStored(KVCacheEvent):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    # vLLM 0.33's trailing fields: omitted from the wire while they keep their defaults.
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class BlockMoved(KVCacheEvent):
    """An event type from the future: the subscriber must skip it."""

    block_hashes: list[bytes | int]


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared | BlockMoved]


def map_struct(cls: type) -> type:
    """The same struct encoded as a map, tagged by "type" (vLLM since mid-2026): vLLM's fields,
    order, defaults and options, without array_like."""
    fields = [
        (f.name, f.type) if f.required else (f.name, f.type, f.default) for f in msgspec.structs.fields(cls)
    ]
    tag = cls.__struct_config__.tag
    return msgspec.defstruct(cls.__name__, fields, omit_defaults=True, gc=False, tag=tag or None)


MAP_STRUCTS = {cls: map_struct(cls) for cls in (KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared, BlockMoved)}

ENCODER = msgspec.msgpack.Encoder()


def wire_hash(digest: bytes, rng: random.Random) -> bytes | int:
    """vLLM sends the digest, or its low 64 bits as an int (unsigned or signed)."""
    how = rng.randrange(3)
    if how == 0:
        return digest
    low = int.from_bytes(digest[24:], "big")
    return low if how == 1 else low - (1 << 64) if low >= 1 << 63 else low


class Rank:
    """One data-parallel rank's prefix cache: blocks by digest, evicted least recently used."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        # digest -> (parent digest, the block's tokens, LoRA name, the block's extra_keys but LoRA)
        self.blocks: dict[bytes, tuple[bytes | None, list[int], str | None, tuple[Any, ...] | None]] = {}
        self.last_used: dict[bytes, int] = {}
        self.clock = 0

    def children(self, digest: bytes) -> bool:
        return any(block[0] == digest for block in self.blocks.values())

    def held(self) -> list[list[Any]]:
        """Every block held, as [seq, parent, tokens, lora, extra_keys] with vLLM's low 64 bits as
        hashes, extra_keys without the LoRA name."""
        low = lambda d: None if d is None else int.from_bytes(d[24:], "big")
        return [[low(d), low(p), tokens, lora, extra] for d, (p, tokens, lora, extra) in self.blocks.items()]


def block_extra_keys(
    start: int, lora: str | None, image: tuple[str, int, int] | None, salt: str | None
) -> tuple[Any, ...] | None:
    """One block's extra_keys as vLLM 0.33 assigns them (`generate_block_hash_extra_keys`): the
    LoRA name, then (identifier, start relative to the block) for an image whose placeholders
    overlap the block, then the cache salt on the first block only."""
    keys: list[Any] = [lora] if lora else []
    if image is not None:
        identifier, offset, length = image
        if offset < start + BLOCK_SIZE and offset + length > start:
            keys.append((identifier, offset - start))
    if salt is not None and start == 0:
        keys.append(salt)
    return tuple(keys) or None


class Engine:
    def __init__(self, pod: int, rng: random.Random, prefixes: list[list[int]], capacity: int, features: float):
        self.pod = pod
        self.rng = rng
        self.features = features
        self.prefixes = prefixes
        self.ranks = {rank: Rank(capacity) for rank in (0, 1)}

    def request(self, rank_id: int) -> list[Any]:
        """Serves one request on a rank: the events it causes, in order."""
        rank = self.ranks[rank_id]
        rng = self.rng
        lora = "alice" if rng.random() < 0.15 else None
        tokens = list(rng.choice(self.prefixes))
        tokens += [rng.randrange(50_000) for _ in range(BLOCK_SIZE * rng.randrange(1, 6))]
        image, salt = None, None
        if self.features and rng.random() < self.features:
            if rng.random() < 0.5:
                offset = rng.randrange(len(tokens))
                image = (f"image-{rng.randrange(3)}", offset, rng.randrange(1, 3 * BLOCK_SIZE))
            else:
                salt = f"tenant-{rng.randrange(2)}"
        digests, extras, parent = [], [], None
        for start in range(0, len(tokens), BLOCK_SIZE):
            block = tokens[start : start + BLOCK_SIZE]
            # The block's keys besides its LoRA (which seeds the hash as before) key its hash.
            keyed = block_extra_keys(start, None, image, salt)
            h = hashlib.sha256(parent or b"seed")
            h.update(b"".join(t.to_bytes(4, "little") for t in block))
            if lora:
                h.update(lora.encode())
            if keyed:
                h.update(repr(keyed).encode())
            parent = h.digest()
            digests.append(parent)
            extras.append((keyed, block_extra_keys(start, lora, image, salt)))
        rank.clock += 1
        cached = 0
        while cached < len(digests) and digests[cached] in rank.blocks:
            rank.last_used[digests[cached]] = rank.clock
            cached += 1
        events: list[Any] = []
        new = digests[cached:]
        if new:
            parent = digests[cached - 1] if cached else None
            for i, digest in enumerate(new):
                at = cached + i
                block = tokens[at * BLOCK_SIZE : (at + 1) * BLOCK_SIZE]
                rank.blocks[digest] = (digests[at - 1] if at else None, block, lora, extras[at][0])
                rank.last_used[digest] = rank.clock
            events.append(
                BlockStored(
                    block_hashes=[wire_hash(d, rng) for d in new],
                    parent_block_hash=None if parent is None else wire_hash(parent, rng),
                    token_ids=tokens[cached * BLOCK_SIZE :],
                    block_size=BLOCK_SIZE,
                    lora_id=1 if lora else None,
                    medium="GPU",
                    lora_name=lora,
                    # Requests without features publish none, as vLLM before 0.33 did.
                    extra_keys=[wire for _, wire in extras[cached:]] if image or salt else None,
                )
            )
        events += self.evict(rank, keep=set(digests))
        return events

    def evict(self, rank: Rank, keep: set[bytes]) -> list[Any]:
        """Evicts least recently used leaves until the rank fits, tail first like vLLM."""
        evicted = []
        while len(rank.blocks) > rank.capacity:
            leaves = [d for d in rank.blocks if d not in keep and not rank.children(d)]
            if not leaves:
                break
            victim = min(leaves, key=lambda d: rank.last_used[d])
            del rank.blocks[victim]
            del rank.last_used[victim]
            evicted.append(victim)
        if not evicted:
            return []
        return [BlockRemoved(block_hashes=[wire_hash(d, self.rng) for d in evicted], medium="GPU")]

    def noise(self) -> list[Any]:
        """Events the subscriber must leave out: another tier, a future type, a partial block."""
        rng = self.rng
        fresh = [rng.randbytes(32) for _ in range(2)]
        pick = rng.randrange(3)
        if pick == 0:
            return [BlockStored(fresh, None, list(range(2 * BLOCK_SIZE)), BLOCK_SIZE, None, "CPU", None)]
        if pick == 1:
            return [BlockMoved(block_hashes=fresh)]
        return [BlockStored(fresh, None, list(range(2 * BLOCK_SIZE - 3)), BLOCK_SIZE, None, "GPU", None)]

    def clear(self, rank_id: int) -> list[Any]:
        self.ranks[rank_id] = Rank(self.ranks[rank_id].capacity)
        return [AllBlocksCleared()]


def as_map(struct: Any) -> Any:
    return MAP_STRUCTS[type(struct)](**msgspec.structs.asdict(struct))


def encode(events: list[Any], rank: int, use_map: bool) -> bytes:
    if use_map:
        events = [as_map(e) for e in events]
    batch = KVEventBatch(ts=time.time(), events=events, data_parallel_rank=rank)
    return ENCODER.encode(as_map(batch) if use_map else batch)


class Pod:
    """One engine's sockets, sequence numbers and replay buffer."""

    def __init__(self, ctx: zmq.Context, index: int, args: argparse.Namespace, ports: tuple[int, int] | None):
        self.ctx, self.index, self.args = ctx, index, args
        self.topic = b"" if args.topic == "empty" else f"kv@pod-{index}@test-model".encode()
        self.topic_frame = index % 2 == 0  # vLLM's replies carry the topic; SGLang's do not
        self.addresses: tuple[str, str | None] | None = None
        self.open()
        self.bind(ports)

    def open(self) -> None:
        """New sockets, not yet bound: messages published now reach only the replay buffer."""
        # XPUB is PUB on the wire, and tells us when a subscriber has subscribed.
        self.pub = self.ctx.socket(zmq.XPUB)
        self.replay = None if self.args.no_replay else self.ctx.socket(zmq.ROUTER)
        for sock in (self.pub, self.replay):
            if sock is not None:
                sock.setsockopt(zmq.LINGER, 2000)
        self.seq = 0
        self.buffer: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=self.args.buffer)

    def bind(self, ports: tuple[int, int] | None) -> None:
        args = self.args
        if args.connect:
            self.pub.connect(args.connect)
            self.addresses = (args.connect, None)
        elif args.ipc:
            base = f"ipc://{args.ipc}/pod-{self.index}"
            self.pub.bind(f"{base}-events")
            if self.replay is not None:
                self.replay.bind(f"{base}-replay")
            self.addresses = (f"{base}-events", f"{base}-replay" if self.replay else None)
        elif self.addresses is not None:  # a restart: the same addresses again
            self.pub.bind(self.addresses[0])
            if self.replay is not None:
                self.replay.bind(self.addresses[1])
        else:
            if ports is None:
                pub = self.pub.bind_to_random_port(f"tcp://{args.host}")
                replay = self.replay.bind_to_random_port(f"tcp://{args.host}") if self.replay else 0
            else:
                pub, replay = ports
                self.pub.bind(f"tcp://{args.host}:{pub}")
                if self.replay is not None:
                    self.replay.bind(f"tcp://{args.host}:{replay}")
            self.addresses = (f"tcp://{args.host}:{pub}", f"tcp://{args.host}:{replay}" if self.replay else None)

    def wait_subscribed(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while not self.pub.poll(10):
            self.serve_replay()
            if time.time() > deadline:
                sys.exit(f"pod {self.index}: nobody subscribed within {timeout} s")
        self.pub.recv()

    def publish(self, payload: bytes, drop: bool) -> int:
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if not drop:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def serve_replay(self) -> None:
        while self.replay is not None and self.replay.poll(0):
            frames = self.replay.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start = frames
            start = int.from_bytes(start, "big")
            head = [client, b""] + ([self.topic] if self.topic_frame else [])
            for seq, payload in self.buffer:
                if seq >= start:
                    self.replay.send_multipart(head + [seq.to_bytes(8, "big"), payload])
            end = [client, b""] + ([b""] if self.topic_frame else [])
            self.replay.send_multipart(end + [(-1).to_bytes(8, "big", signed=True), b""])

    def close(self) -> None:
        self.pub.close()
        if self.replay is not None:
            self.replay.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200, help="batches per pod")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port-base", type=int, help="pod i binds PORT+2i (events) and PORT+2i+1 (replay)")
    parser.add_argument("--capacity", type=int, default=40, help="blocks per rank")
    parser.add_argument("--gap-every", type=int, default=0, help="drop live messages every N (kept for replay)")
    parser.add_argument("--gap-len", type=int, default=1, help="messages dropped per gap")
    parser.add_argument("--restart-at", type=int, default=0, help="restart every odd pod's engine after this many batches")
    parser.add_argument("--restart-down", type=float, default=0.2, help="seconds a restarting engine stays down")
    parser.add_argument("--restart-advance", type=int, default=0, help="batches a restarted engine publishes before it binds")
    parser.add_argument("--buffer", type=int, default=10_000, help="replay buffer, in batches (vLLM's default)")
    parser.add_argument("--no-replay", action="store_true", help="no replay socket (vLLM's default)")
    parser.add_argument("--topic", choices=["pod", "empty"], default="pod", help='kv@pod-<i>@test-model, or "" (vLLM\'s default)')
    parser.add_argument("--connect", help="dial this address (the router binds) instead of binding")
    parser.add_argument("--ipc", help="bind ipc:// sockets in this directory")
    parser.add_argument("--no-wait", action="store_true", help="publish without waiting for a subscriber")
    parser.add_argument("--features", type=float, default=0.0, help="share of requests with an image or a cache salt")
    parser.add_argument("--interval", type=float, default=0.001, help="seconds between batches")
    parser.add_argument("--serve-seconds", type=float, default=60.0)
    parser.add_argument("--log", help="write every batch published here, as JSON lines")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    prefixes = [[rng.randrange(50_000) for _ in range(BLOCK_SIZE * rng.randrange(1, 8))] for _ in range(6)]
    ctx = zmq.Context()
    pods = []
    for i in range(args.pods):
        ports = None if args.port_base is None else (args.port_base + 2 * i, args.port_base + 2 * i + 1)
        pods.append(Pod(ctx, i, args, ports))
    engines = [Engine(i, random.Random(args.seed * 1000 + i), prefixes, args.capacity, args.features) for i in range(args.pods)]
    print(
        json.dumps(
            {
                "pods": [
                    {"topic": p.topic.decode(), "events": p.addresses[0], "replay": p.addresses[1]} for p in pods
                ],
                "sample_query": prefixes[0],
            }
        ),
        flush=True,
    )
    if not args.no_wait:
        for pod in pods:
            pod.wait_subscribed(timeout=60)
    log = open(args.log, "w") if args.log else None

    def record(pod: Pod, seq: int, payload: bytes, restart: bool) -> None:
        if log:
            log.write(json.dumps({"pod": pod.index, "seq": seq, "restart": restart, "payload": payload.hex()}) + "\n")

    published = 0
    unbound = [0] * len(pods)  # batches a restarting pod still publishes before it binds
    for step in range(args.batches):
        for pod, engine in zip(pods, engines):
            restart = bool(args.restart_at) and step == args.restart_at and pod.index % 2 == 1
            if restart:
                pod.close()
                time.sleep(args.restart_down)
                pod.open()
                engines[pod.index] = engine = Engine(pod.index, engine.rng, prefixes, args.capacity, args.features)
                unbound[pod.index] = args.restart_advance
            rank = engine.rng.randrange(2)
            roll = engine.rng.random()
            if roll < 0.01:
                events = engine.clear(rank)
            else:
                events = engine.request(rank)
                if roll > 0.9:
                    events += engine.noise()
            payload = encode(events, rank, use_map=step % 2 == 1)
            gap = args.gap_every and pod.seq % args.gap_every >= args.gap_every - args.gap_len
            seq = pod.publish(payload, drop=bool(gap))
            record(pod, seq, payload, restart)
            published += 1
            if restart or unbound[pod.index]:
                unbound[pod.index] = max(unbound[pod.index] - (not restart), 0)
                if not unbound[pod.index]:
                    pod.bind(None)
                    if not args.no_wait:
                        pod.wait_subscribed(timeout=60)
            pod.serve_replay()
        time.sleep(args.interval)
    if log:
        log.close()
    blocks = {f"{e.pod}/{r}": len(rank.blocks) for e in engines for r, rank in e.ranks.items()}
    held = {f"{e.pod}/{r}": rank.held() for e in engines for r, rank in e.ranks.items()}
    print(json.dumps({"done": {"batches": published, "time": time.time(), "blocks": blocks, "held": held}}), flush=True)

    deadline = time.time() + args.serve_seconds
    while time.time() < deadline:
        for pod in pods:
            pod.serve_replay()
        ready, _, _ = select.select([sys.stdin], [], [], 0.01)
        if ready and not sys.stdin.read(1):
            break  # stdin closed: the test is done


if __name__ == "__main__":
    main()
