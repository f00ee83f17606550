// Package chat renders OpenAI chat requests into the prompt text vLLM
// tokenizes, with the model's Jinja chat template.
//
// # Overview
//
// A [Template] renders /v1/chat/completions requests with the model's chat
// template (package jinja, with jinja2's semantics) after vLLM's message
// preprocessing, then encodes the prompt with the model's tokenizer. Renders
// are proven byte-identical to Python jinja2 configured as transformers
// configures it on twelve real templates, with npm @huggingface/jinja as a
// second opinion. vLLM renders gpt-oss through openai_harmony instead of its
// template, so for gpt-oss kvrouter's render is the template's.
//
// A [Registry] finds each model's template next to its tokenizer (through a
// tokenizer.Registry) or takes an override, as vLLM's --chat-template does.
//
// # Concurrency
//
// A Template is immutable and safe for concurrent use; a Registry is safe
// for concurrent use.
package chat
