// oracle.js: encode texts with the real HuggingFace Rust tokenizers (npm
// "tokenizers", version in test/oracle/package.json), configured as
// transformers' fast tokenizers configure them from tokenizer_config.json.
//
// usage: node oracle.js MODEL_DIR < texts.jsonl > ids.jsonl
// Every input line is a JSON string; every output line is
// [ids with add_special_tokens=false, ids with add_special_tokens=true].
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const readline = require("readline");

const modules = process.env.ORACLE_NODE_MODULES ||
  path.join(__dirname, "..", "..", "test", "oracle", "node_modules");
const { Tokenizer } = require(path.join(modules, "tokenizers"));

// tokenContent returns the text of a tokenizer_config.json token entry.
function tokenContent(t) {
  if (t === null || t === undefined) return null;
  return typeof t === "string" ? t : t.content;
}

// configured returns the path of a tokenizer.json whose post-processor is the
// one transformers' LlamaTokenizerFast / GemmaTokenizerFast install from
// add_bos_token / add_eos_token (update_post_processor), or the original.
function configured(dir) {
  const file = path.join(dir, "tokenizer.json");
  const cfgFile = path.join(dir, "tokenizer_config.json");
  if (!fs.existsSync(cfgFile)) return file;
  const cfg = JSON.parse(fs.readFileSync(cfgFile, "utf8"));
  const cls = (cfg.tokenizer_class || "").replace(/Fast$/, "");
  if (cls !== "LlamaTokenizer" && cls !== "GemmaTokenizer" && cls !== "CodeLlamaTokenizer") return file;
  const tj = JSON.parse(fs.readFileSync(file, "utf8"));
  const idOf = (content) => {
    const a = tj.added_tokens.find((t) => t.content === content);
    if (a) return a.id;
    return tj.model.vocab[content];
  };
  const addBos = cfg.add_bos_token === undefined ? true : cfg.add_bos_token;
  const addEos = cfg.add_eos_token === undefined ? false : cfg.add_eos_token;
  const bos = tokenContent(cfg.bos_token), eos = tokenContent(cfg.eos_token);
  const single = [], pair = [], special = {};
  const sp = (tok, typeId) => ({ SpecialToken: { id: tok, type_id: typeId } });
  const seq = (id, typeId) => ({ Sequence: { id, type_id: typeId } });
  if (addBos) { single.push(sp(bos, 0)); special[bos] = { id: bos, ids: [idOf(bos)], tokens: [bos] }; }
  single.push(seq("A", 0));
  if (addEos) { single.push(sp(eos, 0)); special[eos] = { id: eos, ids: [idOf(eos)], tokens: [eos] }; }
  pair.push(...single);
  if (addBos) pair.push(sp(bos, 1));
  pair.push(seq("B", 1));
  if (addEos) pair.push(sp(eos, 1));
  tj.post_processor = { type: "TemplateProcessing", single, pair, special_tokens: special };
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "oracle-")), "tokenizer.json");
  fs.writeFileSync(out, JSON.stringify(tj));
  return out;
}

async function main() {
  const dir = process.argv[2];
  const tok = Tokenizer.fromFile(configured(dir));
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    if (line === "") continue;
    const text = JSON.parse(line);
    const a = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const b = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    out.push(JSON.stringify([Array.from(a), Array.from(b)]));
    if (out.length >= 256) { process.stdout.write(out.join("\n") + "\n"); out.length = 0; }
  }
  if (out.length) process.stdout.write(out.join("\n") + "\n");
}

main().catch((e) => { console.error(e); process.exit(1); });
