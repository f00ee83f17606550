// unicode.js: which code points the Rust tokenizers' regex engine puts in
// each character class the pre-tokenizer patterns use, and what its NFC
// normalizer does to every code point. Checks the Go Unicode 16 tables and
// NFC against the real engine.
//
// usage: node unicode.js < strings.json > classes.json
// where strings.json is a JSON array of strings to NFC-normalize too.
// prints {"classes": {"L": [[lo, hi], ...], ...},
//         "nfc": [[cp, nfc(cp), nfd(cp), nfc(nfd(cp))], ...], (as code point lists)
//         "nfc_of": [nfc(string), ...]}
// (nfc lists only code points either changes). Code points checked: see cps.
"use strict";
const path = require("path");

const modules = process.env.ORACLE_NODE_MODULES ||
  path.join(__dirname, "..", "..", "test", "oracle", "node_modules");
const tk = require(path.join(modules, "tokenizers"));

const classes = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "N", "P", "S"];
// Every code point up to the last assigned one outside the private use
// planes, and the tag and variation selector block.
const cps = [];
for (let c = 0; c <= 0x323af; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
for (let c = 0xe0000; c <= 0xe01ef; c++) cps.push(c);
const all = cps.map((c) => String.fromCodePoint(c)).join("");

// members returns the code points the regex matches, as ranges: the text of
// all code points is split with the matches removed, and what is left over
// (by code point offsets) is the complement.
async function members(regex) {
  const tj = {
    version: "1.0", added_tokens: [], normalizer: null, post_processor: null, decoder: null,
    pre_tokenizer: { type: "Split", pattern: { Regex: regex }, behavior: "Removed", invert: false },
    model: { type: "WordLevel", vocab: { "[UNK]": 0 }, unk_token: "[UNK]" },
  };
  const tok = tk.Tokenizer.fromString(JSON.stringify(tj));
  const offsets = (await tok.encode(all, null, { addSpecialTokens: false })).getOffsets();
  const ranges = [];
  let next = 0; // index into cps of the first code point not yet classified
  const add = (from, to) => { // cps[from..to) match
    if (from < to) ranges.push([cps[from], cps[to - 1]]);
  };
  for (const [a, b] of offsets) {
    add(next, a);
    next = b;
  }
  add(next, cps.length);
  return ranges;
}

async function main() {
  const out = { classes: {}, nfc: [] };
  for (const c of classes) out.classes[c] = await members(`\\p{${c}}`);
  out.classes.White_Space = await members("\\s");
  const nfc = tk.nfcNormalizer(), nfd = tk.nfdNormalizer();
  for (const c of cps) {
    const s = String.fromCodePoint(c);
    const d = nfd.normalizeString(s);
    const k = nfc.normalizeString(s), kd = nfc.normalizeString(d);
    const cp = (x) => [...x].map((y) => y.codePointAt(0));
    if (k !== s || d !== s) out.nfc.push([c, cp(k), cp(d), cp(kd)]);
  }
  const input = require("fs").readFileSync(0, "utf8");
  out.nfc_of = (input.trim() === "" ? [] : JSON.parse(input)).map((x) => nfc.normalizeString(x));
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
