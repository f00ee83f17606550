// hfjinja.mjs: render templates with npm @huggingface/jinja (version in
// package.json), the JavaScript Jinja engine of transformers.js: kvrouter's
// second opinion on chat templates next to Python jinja2.
//
// usage: TZ=UTC node hfjinja.mjs < requests.jsonl > results.jsonl
//
// Every input line is {"template": SRC, "context": {...}, "now": ISO} and
// every output line is {"out": STRING} or {"error": "Class: message"}.
// "now" (a UTC time without zone) is the clock strftime_now reads, so renders
// are deterministic; the engine's own strftime_now formats it.
import readline from "node:readline";
import { Template } from "@huggingface/jinja";

const RealDate = Date;
let nowMs = RealDate.now();

// The engine calls `new Date()` for strftime_now: a Date subclass installed
// globally answers that call with the requested clock.
class FixedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(nowMs);
    else super(...args);
  }
  static now() {
    return nowMs;
  }
}
globalThis.Date = FixedDate;

const cache = new Map();

function compiled(src) {
  let t = cache.get(src);
  if (t === undefined) {
    t = new Template(src);
    cache.set(src, t);
  }
  return t;
}

function handle(req) {
  if (typeof req.now === "string") {
    nowMs = RealDate.parse(req.now + "Z");
  }
  return compiled(req.template).render(req.context ?? {});
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (line.trim() === "") continue;
  let res;
  try {
    res = { out: handle(JSON.parse(line)) };
    if (typeof res.out !== "string") res = { error: `TypeError: render returned ${typeof res.out}` };
  } catch (e) {
    const name = e && e.constructor ? e.constructor.name : "Error";
    res = { error: `${name}: ${e && e.message !== undefined ? e.message : e}` };
  }
  process.stdout.write(JSON.stringify(res) + "\n");
}
