// bench.js: throughput of the Rust tokenizers (npm "tokenizers") on one
// thread, for comparison with the Go benchmarks in bench_test.go.
//
// usage: node bench.js MODEL_DIR < texts.jsonl
// prints {"mb_per_sec":..,"tokens_per_sec":..,"ms_per_text":[..]}
"use strict";
const fs = require("fs");
const path = require("path");

const modules = process.env.ORACLE_NODE_MODULES ||
  path.join(__dirname, "..", "..", "test", "oracle", "node_modules");
const { Tokenizer } = require(path.join(modules, "tokenizers"));

async function main() {
  const tok = Tokenizer.fromFile(path.join(process.argv[2], "tokenizer.json"));
  const texts = fs.readFileSync(0, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
  let tokens = 0;
  for (const t of texts) tokens += (await tok.encode(t, null, { addSpecialTokens: false })).getIds().length;
  // Per-text time (best of 5), then whole passes for at least 2 s.
  const perText = [];
  for (const t of texts) {
    let best = Infinity;
    for (let i = 0; i < 5; i++) {
      const s = process.hrtime.bigint();
      await tok.encode(t, null, { addSpecialTokens: false });
      best = Math.min(best, Number(process.hrtime.bigint() - s) / 1e6);
    }
    perText.push(best);
  }
  let passes = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < 2) {
    for (const t of texts) await tok.encode(t, null, { addSpecialTokens: false });
    passes++;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  console.log(JSON.stringify({
    mb_per_sec: (bytes * passes) / elapsed / 1e6,
    tokens_per_sec: (tokens * passes) / elapsed,
    ms_per_text: perText,
  }));
}

main().catch((e) => { console.error(e); process.exit(1); });
