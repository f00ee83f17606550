#!/usr/bin/python3
"""jinja2_oracle.py: render templates with Python jinja2 configured as
transformers configures it for chat templates (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols and its {% generation %} block;
tojson as json.dumps(ensure_ascii=False); raise_exception, strftime_now),
and chat requests as vLLM renders them.

Written for kvrouter's differential tests from the documented behaviour of
transformers' chat templating and vLLM's chat preprocessing.

usage: /usr/bin/python3 jinja2_oracle.py < requests.jsonl > results.jsonl

Every input line is a JSON object:
  {"template": SRC, "context": {...}, "now": ISO}          render SRC
  {"template": SRC, "chat": REQUEST, "config": PATH, "now": ISO}
  {"template": SRC, "anthropic": BODY, "config": PATH, "now": ISO}
  {"template": SRC, "responses": BODY, "config": PATH, "now": ISO}
      the same for an Anthropic Messages or OpenAI Responses body, as vLLM
      converts it into a chat request (agent_apis.py)
  {..., "named": {NAME: SRC}, "override": SRC_OR_NAME, "content_format": F}
      the same, SRC the model's template; named: the model's named
      templates (tokenizer_config.json's chat_template list); override: the
      configured template (vLLM's --chat-template) or a template's name;
      content_format: string, openai or auto (vLLM's
      --chat-template-content-format)
      render a chat request with the special tokens of the
      tokenizer_config.json at PATH
and every output line is {"out": STRING} or {"error": "Class: message"}.
"""
import datetime
import json
import sys
import warnings

import agent_apis
import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = [datetime.datetime.now()]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers replaces jinja2's tojson (which HTML-escapes) by this.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW[0].strftime(fmt)


class Generation(jinja2.ext.Extension):
    """transformers' {% generation %} block (its AssistantTracker): the body
    renders unchanged; transformers only records where it lands."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = environment()
CACHE = {}


def compiled(src):
    t = CACHE.get(src)
    if t is None:
        t = ENV.from_string(src)
        CACHE[src] = t
    return t


# ---- vLLM's chat preprocessing, as documented --------------------------
# Follows recent vLLM (2026): content parts flattened with "\n" unless the
# template loops over content (tool messages always flattened), refusal
# parts as text, reasoning/reasoning_content, empty tool_calls dropped,
# arguments parsed leniently to a dict, developer messages turned into one
# merged system message, tools dumped as its pydantic models.

def is_var(node, name):
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def is_attr(node, name, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return (is_var(node.node, name) and isinstance(node.arg, jinja2.nodes.Const)
                and node.arg.value == key)
    if isinstance(node, jinja2.nodes.Getattr):
        return is_var(node.node, name) and node.attr == key
    return False


def is_access(node, name, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and is_access(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return is_access(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return is_access(node.node, name, key)
    return is_attr(node, name, key) if key else is_var(node, name)


def aliases(root, name):
    """Names assigned (transitively) from name, name included."""
    out, todo = [name], [name]
    while todo:
        cur = todo.pop(0)
        for a in root.find_all(jinja2.nodes.Assign):
            if is_access(a.node, cur) and isinstance(a.target, jinja2.nodes.Name):
                out.append(a.target.name)
                if a.target.name != cur:
                    todo.append(a.target.name)
    return out


FORMATS = {}


def content_format(src):
    """'openai' when the template loops over a message's content."""
    if src not in FORMATS:
        FORMATS[src] = detect_format(src)
    return FORMATS[src]


def detect_format(src):
    try:
        root = ENV.parse(src)
    except Exception:
        return "string"
    msgs = aliases(root, "messages")
    loop_vars = []
    for loop in root.find_all(jinja2.nodes.For):
        if any(is_access(loop.iter, m) for m in msgs) and isinstance(loop.target, jinja2.nodes.Name):
            loop_vars.append(loop.target.name)
    for loop in root.find_all(jinja2.nodes.For):
        if any(is_access(loop.iter, v, "content") for v in loop_vars):
            return "openai"
    return "string"


def part_text(p):
    """The text of a content part; None for a text part without text."""
    if isinstance(p, str):
        return p
    if p.get("type") in ("text", "input_text", "output_text"):
        return p.get("text")
    if p.get("type") == "refusal":
        return p.get("refusal")
    raise ValueError("unsupported content part type %r" % p.get("type"))


def convert_message(m, fmt):
    role = m["role"]
    content = m.get("content")
    if content is None:
        content = []
    elif isinstance(content, str):
        content = [content]
    texts = [t for t in (part_text(p) for p in content) if t is not None]
    if fmt == "openai" and role != "tool":
        out = {"role": role, "content": [{"type": "text", "text": t} for t in texts]}
    else:
        # string format; tool messages with text parts only are flattened too
        out = {"role": role, "content": "\n".join(texts)}
    reasoning = m.get("reasoning")
    if reasoning is None:
        reasoning = m.get("reasoning_content")
    if role == "assistant":
        if m.get("tool_calls") is not None:
            out["tool_calls"] = [dict(c, function=dict(c["function"])) for c in m["tool_calls"]]
        if reasoning is not None:
            out["reasoning"] = reasoning
            out["reasoning_content"] = reasoning
    elif role == "tool" and "tool_call_id" in m:
        out["tool_call_id"] = m["tool_call_id"]
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def parse_arguments(args):
    if not args:
        return {}
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return {}
    return args if isinstance(args, dict) else {}


def conversation(messages, fmt):
    conv = [convert_message(m, fmt) for m in messages]
    for m in conv:
        if m["role"] == "assistant" and isinstance(m.get("tool_calls"), list):
            if not m["tool_calls"]:
                del m["tool_calls"]
                continue
            for call in m["tool_calls"]:
                call["function"]["arguments"] = parse_arguments(call["function"].get("arguments"))
    if any(m["role"] == "developer" for m in conv):
        conv = consolidate_system(conv)
    return conv


def consolidate_system(conv):
    """Developer messages become system messages; several system messages
    (or one not first) merge into one first, joined by blank lines."""
    conv = [dict(m, role="system") if m["role"] == "developer" else m for m in conv]
    texts, rest, merge = [], [], False
    for i, m in enumerate(conv):
        if m["role"] != "system":
            rest.append(m)
            continue
        if i > 0 or texts:
            merge = True
        c = m.get("content", "")
        if isinstance(c, list):
            c = "\n".join(p["text"] for p in c if isinstance(p, dict) and "text" in p)
        if c:
            texts.append(c)
    if not merge:
        return conv
    return [{"role": "system", "content": "\n\n".join(texts)}] + rest


def tool_dump(tool):
    """A tool as vLLM's pydantic model dumps it."""
    fn = tool["function"]
    out_fn = {"name": fn["name"], "description": fn.get("description"),
              "parameters": fn.get("parameters")}
    for k in ("strict", "defer_loading"):
        if fn.get(k) is not None:
            out_fn[k] = fn[k]
    return {"type": "function", "function": out_fn}


# apply_chat_template parameters that never reach the template (or that
# vLLM drops from chat_template_kwargs).
CONSUMED = {"chat_template", "tokenize", "padding", "truncation", "max_length",
            "return_tensors", "return_dict", "return_assistant_tokens_mask",
            "tokenizer_kwargs"}


def pick_template(src, req, named, override):
    """The template vLLM renders a request with: the request's
    chat_template, else the configured one, else the model's; a name among
    the model's named templates stands for that template, and without
    either a request with tools uses "tool_use" when there is one
    (transformers' get_chat_template)."""
    given = req.get("chat_template")
    if given is None:
        given = override
    if named is None:
        return src if given is None else given
    if given is not None:
        return named.get(given, given)
    if req.get("tools") is not None and "tool_use" in named:
        return named["tool_use"]
    if "default" in named:
        return named["default"]
    raise ValueError("no default chat template among the named ones")


def render_chat(src, req, special, fmt="auto"):
    gen = req.get("add_generation_prompt", True)
    cont = req.get("continue_final_message", False)
    if gen and cont:
        raise ValueError("add_generation_prompt and continue_final_message cannot both be true")
    if fmt in (None, "auto"):
        fmt = content_format(src)
    conv = conversation(req["messages"], fmt)
    tools = req.get("tools")
    # vLLM merges chat_template_kwargs over its own apply_chat_template
    # arguments, then transformers puts special tokens under the kwargs.
    kwargs = dict(tools=None if tools is None else [tool_dump(t) for t in tools],
                  documents=req.get("documents"), add_generation_prompt=gen,
                  continue_final_message=cont)
    kwargs.update(req.get("chat_template_kwargs") or {})
    effort = req.get("reasoning_effort")
    if effort is not None:  # vLLM passes it, and enable_thinking unless given
        kwargs["reasoning_effort"] = effort
        if "enable_thinking" not in (req.get("chat_template_kwargs") or {}):
            kwargs["enable_thinking"] = effort != "none"
    for k in CONSUMED:
        kwargs.pop(k, None)
    gen = kwargs.pop("add_generation_prompt")
    cont = kwargs.pop("continue_final_message")
    if gen and cont:
        raise ValueError("continue_final_message and add_generation_prompt are not compatible")
    ctx = dict(special)
    ctx.update(kwargs)
    ctx.update(messages=conv, add_generation_prompt=gen)
    out = compiled(src).render(**ctx)
    if cont:
        out = continue_final(out, conv[-1]["content"])
    return out


def continue_final(rendered, final):
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:
                final = block["text"]
                break
        else:
            raise ValueError("no text to continue in the final message")
    if final.strip() not in rendered:
        raise ValueError("the final message does not appear in the rendered chat")
    loc = rendered.rindex(final.strip())
    if rendered[loc:loc + len(final.lstrip())] == final:
        return rendered[:loc + len(final.lstrip())]
    return rendered[:loc + len(final.strip())]


SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
           "cls_token", "mask_token"]


def special_tokens(path):
    """transformers' special_tokens_map from tokenizer_config.json."""
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)

    def content(t):
        return t.get("content") if isinstance(t, dict) else t

    out = {}
    for k in SPECIAL:
        v = content(cfg.get(k))
        if v:
            out[k] = v
    extra = [content(t) for t in cfg.get("additional_special_tokens") or []]
    extra = [t for t in extra if t]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def handle(req):
    if "now" in req:
        NOW[0] = datetime.datetime.fromisoformat(req["now"])
    if "anthropic" in req:
        req = dict(req, chat=agent_apis.anthropic_chat(req["anthropic"]))
    elif "responses" in req:
        req = dict(req, chat=agent_apis.responses_chat(req["responses"]))
    if "chat" in req:
        src = req["template"]
        if "named" in req or "override" in req:
            src = pick_template(src, req["chat"], req.get("named"), req.get("override"))
        return render_chat(src, req["chat"], special_tokens(req.get("config")), req.get("content_format"))
    return compiled(req["template"]).render(**(req.get("context") or {}))


def main():
    warnings.simplefilter("ignore")  # Python's compile-time SyntaxWarnings
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            res = {"out": handle(req)}
        except Exception as e:  # every failure is a result
            res = {"error": "%s: %s" % (type(e).__name__, e)}
        out.write(json.dumps(res, ensure_ascii=False) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
