// Package tokenizer maps a served model name to its tokenizer and turns
// prompt text into exactly the token ids vLLM produces for it. Package chat
// renders chat requests into that text.
//
// # Overview
//
// A [Tokenizer] is loaded from a model's tokenizer.json (and
// tokenizer_config.json) and encodes text exactly as the HuggingFace Rust
// tokenizers do for the same files, configured as transformers' fast
// tokenizers configure them. The pipeline, per Encode:
//
//  1. added tokens with normalized=false (special or not) are cut out of the
//     raw text, leftmost-longest, with their single_word, lstrip and rstrip
//     options (ids assigned as the Rust library assigns them);
//  2. every stretch between them is normalized (NFC, Prepend, Replace,
//     Sequence), then added tokens with normalized=true are cut out of it;
//  3. the rest is pre-tokenized (Split over a pattern with Isolated,
//     Removed, MergedWithPrevious, MergedWithNext or Contiguous behavior;
//     ByteLevel; Metaspace; Digits; Punctuation; Sequence);
//  4. every word is encoded by the BPE model (byte-level, or
//     SentencePiece-style with byte_fallback and unk fusing; ignore_merges);
//  5. with add_special_tokens, the post-processor's template (or the BOS/EOS
//     that tokenizer_config.json's add_bos_token/add_eos_token give Llama and
//     Gemma tokenizers) is put around the ids.
//
// Anything else in a tokenizer file that would change ids is refused by
// [Load] and [New] with an error: never a silently different encoding.
//
// # Exactness
//
// Pre-tokenizer patterns follow Oniguruma semantics with Unicode 16
// character classes (tables generated into internal/unicode16, since Go's
// unicode package is 15.0). The Llama-3, Qwen2/3, gpt-oss (o200k),
// Mistral tekken and DeepSeek-V3 patterns are matched by hand-written
// scanners, each tested against the generic engine; any other pattern runs on
// github.com/dlclark/regexp2 (a backtracking engine with lookaround) after
// its \p{..} and \s classes are rewritten to Unicode 16 sets. NFC is
// golang.org/x/text's, except that text where it would insert U+034F after
// 30 combining marks is composed without the joiner, as the Rust side does,
// and U+11938 stays apart as the Rust tables have it. Normalizers whose Go
// and Rust tables disagree more (NFKC, NFKD, NFD) are refused.
// Long SentencePiece words (a whole document can be one) merge in
// O(n log n).
//
// Parity is proven by tests against the real Rust tokenizers (npm
// "tokenizers", see testdata/oracle.js) on six model families: committed
// goldens for a corpus of 5,000+ strings, plus the live oracle on a sample;
// variants of those files exercise the components the six do not use, and
// the Unicode tables and NFC are compared code point by code point.
//
// # Registry
//
// A [Registry] maps served model names to tokenizers: aliases (served names,
// LoRA adapters) lead to a base model, whose files come from a configured
// directory or a Hugging Face cache (models--ORG--NAME/snapshots/REV/, the
// revision refs/main names), downloaded first from a hub when one is
// configured. Each model loads once however many requests ask at the same
// time (singleflight); the least recently used are dropped beyond
// Config.MaxLoaded. An unknown model is [ErrUnknownModel]: route by load.
//
// # Prefix caches
//
// A PrefixCache (one per model a Registry loads, Config.PrefixCacheBytes)
// encodes the next turn of a growing conversation from where the previous
// one can be resumed exactly: after an added token the scan's decisions up
// to which depend only on bytes the two texts share, checked by re-encoding
// the window before it. Its ids are always Encode's; see PrefixCache and
// docs/architecture.md.
//
// # Concurrency
//
// A Tokenizer is immutable after loading except for its caches of words: a
// shared one, internally locked, and a pool of small ones that each
// encoding takes for itself while it runs. One Tokenizer serves any number
// of goroutines. A Registry and a PrefixCache are safe for concurrent use.
package tokenizer
