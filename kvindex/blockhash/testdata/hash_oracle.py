#!/usr/bin/python3
"""Reference block hashes for kvindex's differential test, computed the way
vLLM computes them (docs/vllm.md section 1), with Python's own pickle and
hashlib, Debian's python3-cbor2 and, for the xxhash algorithms, Debian's
python3-xxhash (xxhash.xxh3_128_digest, as vLLM calls it). Independent of
the Go code under test.

stdin:  {"cases": [{"algo": "sha256"|"sha256_cbor"|"xxhash"|"xxhash_cbor", "seed": str,
          "block_size": int, "tokens": [int], "lora": str, "salt": str,
          "mm": [[identifier, offset, length]], "bytes": bool}]}
          ("" means no LoRA / no salt; mm: multimodal items by offset)
stdout: {"python": version, "cbor2": version, "xxhash": version or "",
          "results": [{"root": hex,
          "blocks": [hex digest of every full block],
          "values": [the event integer of every block],
          "seed_bytes": hex, "block_bytes": [hex]}]}   (bytes only if asked)
Exit status 3 when cbor2 is missing, 4 when a case asks for an xxhash
algorithm and xxhash is missing.
"""
import hashlib
import json
import pickle
import sys

try:
    import cbor2
except ImportError:
    sys.stderr.write("hash_oracle.py: cannot import cbor2 (Debian python3-cbor2): run `make deps`\n")
    sys.exit(3)


try:
    import xxhash
except ImportError:
    xxhash = None


def serialize(algo, obj):
    if algo in ("sha256", "xxhash"):
        return pickle.dumps(obj, protocol=5)
    if algo in ("sha256_cbor", "xxhash_cbor"):
        return cbor2.dumps(obj, canonical=True)
    raise ValueError("unknown algorithm %r" % algo)


def digest(algo, data):
    if algo.startswith("sha256"):
        return hashlib.sha256(data).digest()
    return xxhash.xxh3_128_digest(data)


def mm_keys(mm, start, end):
    """vLLM's _gen_mm_extra_hash_keys: (identifier, offset from the block's
    start) of every multimodal item whose placeholder overlaps [start, end)."""
    keys = []
    for ident, offset, length in mm:
        if end > offset:
            if start >= offset + length:
                continue
            keys.append((str(ident), offset - start))
            if end >= offset + length:
                continue
            break
        break
    return keys


def run_case(case):
    algo, size, tokens = case["algo"], case["block_size"], case["tokens"]
    want_bytes = case.get("bytes", False)
    seed_bytes = serialize(algo, case["seed"])
    parent = digest(algo, seed_bytes)  # NONE_HASH
    res = {"root": parent.hex(), "blocks": [], "values": []}
    if want_bytes:
        res["seed_bytes"] = seed_bytes.hex()
        res["block_bytes"] = []
    mm = case.get("mm") or []  # [[identifier, offset, length]] by offset
    for i in range(len(tokens) // size):  # full blocks only
        keys = []
        if case["lora"]:
            keys.append(case["lora"])  # every block
        keys.extend(mm_keys(mm, i * size, (i + 1) * size))
        if i == 0 and case["salt"]:
            keys.append(case["salt"])  # block 0 only
        extra = tuple(keys) if keys else None
        data = serialize(algo, (parent, tuple(tokens[i * size:(i + 1) * size]), extra))
        parent = digest(algo, data)
        res["blocks"].append(parent.hex())
        # vLLM's maybe_convert_block_hash: the integer KV events carry.
        res["values"].append(int.from_bytes(parent, byteorder="big") & ((1 << 64) - 1))
        if want_bytes:
            res["block_bytes"].append(data.hex())
    return res


def cbor2_version():
    try:
        from importlib import metadata
        return metadata.version("cbor2")
    except Exception:  # noqa: BLE001 - only informational
        return getattr(cbor2, "__version__", "unknown")


def main():
    doc = json.load(sys.stdin)
    if xxhash is None and any(c["algo"].startswith("xxhash") for c in doc["cases"]):
        sys.stderr.write("hash_oracle.py: cannot import xxhash (Debian python3-xxhash): run `make deps`\n")
        sys.exit(4)
    out = {
        "python": sys.version.split()[0],
        "cbor2": cbor2_version(),
        "xxhash": xxhash.VERSION if xxhash else "",
        "results": [run_case(c) for c in doc["cases"]],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
