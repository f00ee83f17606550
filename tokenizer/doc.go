// Package tokenizer maps a served model name to its tokenizer and chat
// template and turns prompt text or chat messages into exactly the token ids
// vLLM produces for them.
package tokenizer
