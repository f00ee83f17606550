#!/usr/bin/python3
"""A vLLM-faithful KV-event publisher for kvrouter's interop tests.

Written from docs/vllm.md section 2, independently of kvrouter's Go code.
It binds a PUB socket and a replay ROUTER like vLLM's ZmqEventPublisher and
sends one round of batches in every wire form vLLM's releases used:

  * outer batch as [ts, events, dp_rank], as v0.9's [ts, events], and as a map;
  * events as tag-first positional arrays (short, long, with trailing unknown
    fields) and as maps with a "type" key and omitted defaults;
  * block hashes as unsigned ints of every width and as 32 raw digest bytes;
  * BlockStored, BlockRemoved, AllBlocksCleared, unknown tags, CPU medium,
    a sliding-window group.

Messages are [topic, seq (8 bytes big-endian), msgpack payload] with seq from
0; the ROUTER answers [b"", start_seq] with [b"", seq, payload] (or, with
--topic-in-replay, [b"", topic, seq, payload]) per buffered batch from
start_seq on, then [b"", seq=-1, b""].

Protocol with the test, one JSON object per stdout line:
  {"event_port": P, "replay_port": R}   once bound
  {"round": n, "expected": [...]}        after publishing each round: the
                                         hashes the pod must hold, sorted
                                         (with --random-root, also "rekeyed":
                                         what a router rekeying the pod with
                                         --seed must hold)
  {"reset": true}                        after a "reset" command
A round is published at start (unless --idle) and one more per command read
on stdin, one per line:
  next     publish a round
  lose N   publish a round whose first N batches go to the replay buffer only,
           as if lost on the wire
  reset    play a restart the subscriber cannot see on the socket: sequence
           numbers start again from 0 and the replay buffer is emptied
With --engine sglang or trtllm a round is, instead, what that engine
publishes (each written from the engine's own source, not from kvrouter's):

  * sglang (sgl-project/sglang python/sglang/srt/disaggregation/kv_events.py
    at 612d5790): batches [ts, events, attn_dp_rank]; one BlockStored per
    16-token page as a tagged array [tag, block_hashes, parent_block_hash,
    token_ids, block_size, lora_id], and the same as maps with a "type" key
    (the form of later releases); block ids of SGLang's own, SHA-256 over
    the parent's digest and the page's token ids as 4-byte little-endian
    integers, the digest's first 8 bytes read as a signed 64-bit integer;
    a page of one token (SGLang's default page size); and a removal;
  * trtllm (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/
    kv_cache_events.py): batches [ts, events, data_parallel_rank], events as
    maps with a "type" key and vLLM's field names, 32-token blocks, ids the
    first 8 bytes of a SHA-256 chain read as a signed integer; a removal.

Its "expected" are then the hashes a router must index: its own (vLLM's,
with --seed, 16-token blocks) of the token ids of the blocks live at the
round's end.

The script exits when stdin closes. Needs Debian's python3-zmq and
python3-msgpack (run it with /usr/bin/python3).
"""

import argparse
import hashlib
import json
import os
import pickle
import struct
import sys
import time
from collections import deque

import msgpack
import zmq

END_SEQ = b"\xff" * 8


def digest(value):
    """32 raw bytes whose last 8, read big-endian, are value."""
    head = bytes((value * 7 + i) & 0xFF for i in range(24))
    return head + value.to_bytes(8, "big")


def vllm_chain(seed, tokens, block_size, extra=None, parent=None):
    """vLLM's default prefix-cache hash ("sha256": SHA-256 of pickle protocol 5)
    of every full block of tokens: (parent digest, tuple(block tokens), extra),
    chained from NONE_HASH = H(seed string). Returns the full digests."""
    h = lambda obj: hashlib.sha256(pickle.dumps(obj, protocol=5)).digest()
    if parent is None:
        parent = h(seed)
    out = []
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = h((parent, tuple(tokens[i:i + block_size]), extra))
        out.append(parent)
    return out


def value_of(h):
    if isinstance(h, bytes):
        return int.from_bytes(h, "big") & (2**64 - 1)
    return h


class Round:
    """One round of batches; tracks the hashes the subscriber must end with."""

    def __init__(self, base, rank, seed=None, root=None):
        self.seed = seed
        self.root = root  # the chains' NONE_HASH; None: H(seed)
        self.base = base
        self.rank = rank
        self.live = {}
        self.rekeyed = []
        self.batches = []

    def h(self, i):
        # Spread over every msgpack integer width: fixint, uint8..uint64.
        widths = [0, 200, 60000, 4000000000, 2**63 + 5]
        return widths[i % len(widths)] + self.base + i

    def store(self, hashes, counted=True):
        if counted:
            for h in hashes:
                v = value_of(h)
                self.live[v] = self.live.get(v, 0) + 1

    def remove(self, hashes):
        for h in hashes:
            v = value_of(h)
            self.live[v] -= 1
            if self.live[v] == 0:
                del self.live[v]

    def add(self, outer):
        self.batches.append(msgpack.packb(outer, use_bin_type=True))

    def build(self):
        ts = time.time()
        h = self.h
        bs = 4
        toks = lambda n: list(range(100, 100 + bs * n))
        # Stored, then wiped by AllBlocksCleared: must not survive.
        gone = [h(0), h(1)]
        self.add([ts, [["BlockStored", gone, None, toks(2), bs, None, None]], self.rank])
        self.add([ts, [["AllBlocksCleared"]], self.rank])
        self.live.clear()
        # v0.9: two-element batch, short positional event with lora_id.
        a = [h(2), h(3), h(4)]
        self.add([ts, [["BlockStored", a, None, toks(3), bs, 7, "GPU"]]])
        self.store(a)
        # Newest positional layout with trailing fields unknown to anyone.
        b = [h(5), h(6)]
        self.add([ts, [["BlockStored", b, a[-1], toks(2), bs, None, None, "alice",
                        [["alice"], ["alice"]], 0, "full_attention", None, "future", [1]]], self.rank])
        self.store(b)
        # Map outer, map events with omitted defaults and unknown fields.
        c = [h(7), h(8)]
        self.add({"ts": ts, "events": [
            {"type": "BlockStored", "block_hashes": c, "token_ids": toks(2), "block_size": bs,
             "locality": "local", "session_id": "s"},
            {"block_hashes": [a[0]], "type": "BlockRemoved"},
        ], "data_parallel_rank": self.rank})
        self.store(c)
        self.remove([a[0]])
        # Raw digest hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0), CPU tier.
        d = [digest(h(9)), digest(h(10))]
        self.add([ts, [["BlockStored", d, digest(h(8)), [], 0, None, "CPU"]], self.rank])
        self.store(d)
        self.add([ts, [{"type": "BlockRemoved", "block_hashes": [d[0]], "medium": "CPU"}], self.rank])
        self.remove([d[0]])
        # Unknown tags, and a sliding-window group, both ignored.
        self.add([ts, [["BlockPinned", [h(11)]], {"type": "Future", "block_hashes": [h(12)]},
                       ["BlockStored", [h(13)], None, toks(1), bs, None, None, None, None, 1,
                        "sliding_window"]], self.rank])
        # The same hash stored twice and removed once stays.
        e = [h(14)]
        self.add([ts, [["BlockStored", e, None, toks(1), bs, None, None],
                       ["BlockStored", e, None, toks(1), bs, None, None],
                       ["BlockRemoved", e, None]], self.rank])
        self.store(e)
        self.store(e)
        self.remove(e)
        if self.seed is not None:
            self.build_real(ts)
        return self.batches

    def build_real(self, ts):
        """Events with real vLLM hashes (block size 16), checkable by kvrouter."""
        toks = list(range(self.base % 50000, self.base % 50000 + 64))
        chain = vllm_chain(self.seed, toks, 16, parent=self.root)
        ints = [value_of(d) for d in chain]
        self.add([ts, [["BlockStored", ints[:3], None, toks[:48], 16, None, None],
                       ["BlockStored", ints[3:], ints[2], toks[48:], 16, None, None]], self.rank])
        self.store(ints)
        lora = vllm_chain(self.seed, toks[:32], 16, extra=("alice",), parent=self.root)
        self.add([ts, [{"type": "BlockStored", "block_hashes": lora, "parent_block_hash": None,
                        "token_ids": toks[:32], "block_size": 16, "lora_name": "alice",
                        "extra_keys": [["alice"], ["alice"]]}], self.rank])
        self.store(lora)
        # A router hashing the same token ids from H(seed): every real block.
        self.rekeyed = sorted(value_of(d) for d in vllm_chain(self.seed, toks, 16)
                              + vllm_chain(self.seed, toks[:32], 16, extra=("alice",)))


def engine_ids(tokens, size):
    """An engine's own block ids: a SHA-256 chain over the parent's digest
    and the block's token ids (uint32 little-endian), each id the digest's
    first 8 bytes as a signed 64-bit integer."""
    digest, ids = b"", []
    for i in range(0, len(tokens) - size + 1, size):
        digest = hashlib.sha256(digest + struct.pack("<%dI" % size, *tokens[i:i + size])).digest()
        ids.append(struct.unpack(">q", digest[:8])[0])
    return ids


def engine_round(engine, base, rank, seed):
    """One round of an engine's batches, and the router's hashes of the
    blocks live at its end."""
    ts = time.time()
    batches = [msgpack.packb([ts, [["AllBlocksCleared"]], rank])]
    start = (base + 137 * (base // 1000000)) % 50000  # each round its own tokens
    toks = list(range(start, start + 128))
    live = set()  # indexes of the router's 16-token blocks
    if engine == "sglang":
        ids = engine_ids(toks[:64], 16)
        events = []
        for i, page in enumerate(ids):  # one event per page, tagged arrays
            parent = ids[i - 1] if i else None
            events.append(["BlockStored", [page], parent, toks[i * 16:(i + 1) * 16], 16, None])
        batches.append(msgpack.packb([ts, events, rank]))
        live.update(range(4))
        other = engine_ids(toks[64:], 16)  # another prompt, as maps
        batches.append(msgpack.packb([ts, [
            {"type": "BlockStored", "block_hashes": [page], "parent_block_hash": other[i - 1] if i else None,
             "token_ids": toks[64 + i * 16:64 + (i + 1) * 16], "block_size": 16}
            for i, page in enumerate(other)], rank]))
        live.update(range(4, 8))
        one = engine_ids(toks[:1], 1)  # a page of one token: refused
        batches.append(msgpack.packb([ts, [["BlockStored", one, None, toks[:1], 1, None]], rank]))
        # The removal comes last: once the index shows it, the refused page
        # before it has been counted.
        batches.append(msgpack.packb([ts, [["BlockRemoved", [other[3]]]], rank]))
        live.discard(7)
        chains = [toks[:64], toks[64:]]
    else:
        ids = engine_ids(toks[:96], 32)
        batches.append(msgpack.packb([ts, [
            {"type": "BlockStored", "block_hashes": ids[:2], "parent_block_hash": None, "token_ids": toks[:64],
             "block_size": 32, "lora_id": None, "medium": "GPU", "lora_name": None},
            {"type": "BlockStored", "block_hashes": ids[2:], "parent_block_hash": ids[1], "token_ids": toks[64:96],
             "block_size": 32, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 0}], rank]))
        live.update(range(6))
        batches.append(msgpack.packb([ts, [{"type": "BlockRemoved", "block_hashes": [ids[1]], "medium": "GPU"}], rank]))
        live.difference_update({2, 3})
        chains = [toks[:96]]
    hashes = []
    for chain in chains:
        hashes += [value_of(d) for d in vllm_chain(seed, chain, 16)]
    return batches, sorted(hashes[i] for i in live)


class Publisher:
    def __init__(self, args):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, 100000)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.event_port = self.bind(self.pub, args.event_port)
        self.replay_port = self.bind(self.router, args.replay_port)
        self.topic = args.topic.encode()
        self.topic_in_replay = args.topic_in_replay
        self.buffer = deque(maxlen=args.buffer)
        self.seq = 0

    @staticmethod
    def bind(sock, port):
        if port == 0:
            return sock.bind_to_random_port("tcp://127.0.0.1")
        sock.bind("tcp://127.0.0.1:%d" % port)
        return port

    def publish(self, payload, lost=False):
        seq = struct.pack(">Q", self.seq)
        self.seq += 1
        self.buffer.append((seq, payload))
        if not lost:
            self.pub.send_multipart([self.topic, seq, payload])

    def reset(self):
        self.seq = 0
        self.buffer.clear()

    def serve_replay(self):
        while True:
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 3 or len(frames[2]) != 8:
                continue
            ident, start = frames[0], struct.unpack(">Q", frames[2])[0]
            for seq, payload in list(self.buffer):
                if struct.unpack(">Q", seq)[0] >= start:
                    if self.topic_in_replay:
                        self.router.send_multipart([ident, b"", self.topic, seq, payload])
                    else:
                        self.router.send_multipart([ident, b"", seq, payload])
            self.router.send_multipart([ident, b"", END_SEQ, b""])

    def close(self):
        self.pub.close(0)
        self.router.close(0)
        self.ctx.term()


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--event-port", type=int, default=0)
    ap.add_argument("--replay-port", type=int, default=0)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--base", type=int, default=1000, help="first hash of round 0")
    ap.add_argument("--topic", default="")
    ap.add_argument("--topic-in-replay", action="store_true")
    ap.add_argument("--buffer", type=int, default=10000)
    ap.add_argument("--seed", help="PYTHONHASHSEED string: also publish events with real vLLM hashes")
    ap.add_argument("--idle", action="store_true", help="publish nothing until told")
    ap.add_argument("--engine", choices=["sglang", "trtllm"],
                    help="publish what this engine publishes instead (needs --seed)")
    ap.add_argument("--random-root", action="store_true",
                    help="chain the real events from 32 random bytes, as vLLM without PYTHONHASHSEED")
    args = ap.parse_args()
    root = os.urandom(32) if args.random_root else None  # one per process, as vLLM's NONE_HASH

    p = Publisher(args)
    say({"event_port": p.event_port, "replay_port": p.replay_port})
    expected = {}
    rounds = [0]  # rounds published so far

    def publish_round(lose=0):
        rnd = rounds[0]
        rounds[0] += 1
        if args.engine:
            batches, want = engine_round(args.engine, args.base + rnd * 1000000, args.rank, args.seed)
            for i, payload in enumerate(batches):
                p.publish(payload, lost=i < lose)
            say({"round": rnd, "expected": want})
            return
        r = Round(args.base + rnd * 1000000, args.rank, args.seed, root)
        for i, payload in enumerate(r.build()):
            p.publish(payload, lost=i < lose)
        expected.clear()  # each round starts with AllBlocksCleared
        expected.update(r.live)
        said = {"round": rnd, "expected": sorted(expected)}
        if args.random_root:
            said["rekeyed"] = r.rekeyed
        say(said)

    if not args.idle:
        publish_round()
    poller = zmq.Poller()
    poller.register(p.router, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        ready = dict(poller.poll(1000))
        if p.router in ready:
            p.serve_replay()
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            line = sys.stdin.readline()
            if not line:
                break
            cmd = line.split()
            if cmd == ["reset"]:
                p.reset()
                say({"reset": True})
                continue
            if cmd[:1] == ["lose"] and len(cmd) == 2:
                publish_round(lose=int(cmd[1]))
            elif cmd == ["next"]:
                publish_round()
            else:
                sys.exit("publisher.py: unknown command %r" % line)
    p.close()


if __name__ == "__main__":
    main()
