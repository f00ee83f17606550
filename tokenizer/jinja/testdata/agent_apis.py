"""agent_apis.py: vLLM's conversion of Anthropic Messages and OpenAI
Responses request bodies into the chat completions request its chat
template path renders, for jinja2_oracle.py's differential tests.

Written for kvrouter from vLLM's source: the Anthropic conversion of
vllm/entrypoints/anthropic/serving.py and inline_system.py (commit a8c3bdb2;
AnthropicServingMessages.to_chat_completion_request, _convert_block,
_convert_user_tool_result, AnthropicTool's input_schema validator), the
Responses one of vllm/entrypoints/openai/responses/utils.py (commit
01ca842d; construct_input_messages, _construct_message_from_response_item,
should_continue_final_message, construct_tool_dicts).

Bodies are the ones vLLM accepts and renders without a template probe
(no system message after the first turn).
"""
import json

BILLING = "x-anthropic-billing-header"


def merge_kwargs(defaults, overrides):
    """vLLM's merge_kwargs: overrides win unless None or "auto"."""
    out = dict(defaults or {})
    out.update({k: v for k, v in overrides.items() if v not in (None, "auto")})
    return out


def _blocks_text(blocks):
    return "".join(b["text"] for b in blocks
                   if b.get("type") == "text" and b.get("text") and not b["text"].startswith(BILLING))


def _system_text(msg):
    content = msg["content"]
    if isinstance(content, str):
        return "" if content.startswith(BILLING) else content
    return _blocks_text(content)


def _image_url(source):
    if source.get("type") == "url":
        return source.get("url", "")
    return "data:%s;base64,%s" % (source.get("media_type", "image/jpeg"), source.get("data", ""))


def _user_tool_result(block, out):
    content = block.get("content")
    images = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for item in content:
            if item.get("type") == "text":
                texts.append(item.get("text", ""))
            elif item.get("type") == "image":
                images.append(_image_url(item.get("source") or {}))
        text = "\n".join(texts)
    else:
        text = ""
    out.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "", "content": text or ""})
    if images:
        out.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in images]})


def _anthropic_message(msg, out):
    new = {"role": msg["role"]}
    if isinstance(msg["content"], str):
        new["content"] = msg["content"]
        out.append(new)
        return
    parts, calls, reasoning = [], [], []
    for b in msg["content"]:
        t = b["type"]
        if t == "text" and b.get("text"):
            parts.append({"type": "text", "text": b["text"]})
        elif t == "image" and b.get("source"):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(b["source"])}})
        elif t == "thinking" and b.get("thinking") is not None:
            reasoning.append(b["thinking"])
        elif t == "tool_use":
            calls.append({"id": b.get("id"), "type": "function",
                          "function": {"name": b.get("name") or "", "arguments": json.dumps(b.get("input") or {})}})
        elif t == "tool_result":
            if msg["role"] == "user":
                _user_tool_result(b, out)
            else:
                c = b.get("content")
                parts.append({"type": "text", "text": "Tool result: %s" % (str(c) if c else "")})
    if reasoning:
        new["reasoning"] = "".join(reasoning)
    if calls:
        new["tool_calls"] = calls
    if parts:
        new["content"] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    elif not calls and not reasoning:
        if msg["role"] == "user":
            return
    out.append(new)


def anthropic_chat(body):
    """The chat request vLLM renders for an Anthropic Messages body."""
    msgs = list(body["messages"])
    leading = []
    while msgs and msgs[0]["role"] == "system":
        leading.append(_system_text(msgs.pop(0)))
    system = body.get("system")
    if isinstance(system, list):
        system = _blocks_text(system)
    system = "\n\n".join(t for t in (system or "", "\n\n".join(t for t in leading if t)) if t)
    out = []
    if system:
        out.append({"role": "system", "content": system})
    for m in msgs:
        _anthropic_message(m, out)
    effort = None
    if (body.get("output_config") or {}).get("effort") is not None:
        effort = body["output_config"]["effort"]
    if (body.get("thinking") or {}).get("type") == "disabled":
        effort = "none"
    user = body.get("chat_template_kwargs") or {}
    extra = {"add_generation_prompt": True, "continue_final_message": False, "reasoning_effort": effort}
    if effort is not None and "enable_thinking" not in user:
        extra["enable_thinking"] = effort != "none"
    req = {"messages": out, "chat_template_kwargs": merge_kwargs(user, extra)}
    if body.get("tools") is not None:
        tools = []
        for t in body["tools"]:
            schema = t["input_schema"]
            if "type" not in schema:
                schema["type"] = "object"
            fn = {"name": t["name"], "description": t.get("description"), "parameters": schema}
            for k in ("strict", "defer_loading"):
                if t.get(k) is not None:
                    fn[k] = t[k]
            tools.append({"type": "function", "function": fn})
        req["tools"] = tools
    return req


def _first_text(items):
    first = items[0]
    return first.get("text", "") if isinstance(first, dict) else first


def _response_item(item, prev):
    prev = prev if prev and prev.get("role") == "assistant" else None
    kind = item.get("type")
    if kind == "function_call":
        call = {"id": item["call_id"], "function": {"name": item["name"], "arguments": item["arguments"]},
                "type": "function"}
        if prev is not None:
            if prev.get("tool_calls") is None:
                prev["tool_calls"] = [call]
                return None
            prev["tool_calls"].append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "function_call_output":
        return {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
    if kind == "reasoning":
        text = ""
        if item.get("content"):
            text = _first_text(item["content"])
        elif item.get("summary"):
            text = _first_text(item["summary"])
        if prev is not None and prev.get("reasoning") is None:
            prev["reasoning"] = text
            return None
        return {"role": "assistant", "reasoning": text}
    if item.get("role") == "assistant":
        content = item.get("content")
        if content and not isinstance(content, str):
            text = _first_text(content)
        elif isinstance(content, str):
            text = content
        else:
            text = ""
        if prev is not None and prev.get("content") is None:
            prev["content"] = text
            return None
        return {"role": "assistant", "content": text}
    return item


def responses_chat(body):
    """The chat request vLLM renders for an OpenAI Responses body."""
    msgs = []
    if body.get("instructions"):
        msgs.append({"role": "system", "content": body["instructions"]})
    inp = body["input"]
    cont = False
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    else:
        conv = []
        for item in inp:
            m = _response_item(item, conv[-1] if conv else None)
            if m is not None:
                conv.append(m)
        msgs.extend(conv)
        if inp and isinstance(inp[-1], dict) and inp[-1].get("type", "message") in ("message", "reasoning"):
            cont = inp[-1].get("status") in ("in_progress", "incomplete")
    effort = (body.get("reasoning") or {}).get("effort")
    extra = {"add_generation_prompt": not cont, "continue_final_message": cont, "reasoning_effort": effort}
    req = {"messages": msgs, "chat_template_kwargs": merge_kwargs(body.get("chat_template_kwargs"), extra)}
    if body.get("tools"):
        req["tools"] = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
                        for t in body["tools"] if t.get("type") == "function"]
    return req
