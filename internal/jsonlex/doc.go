// Package jsonlex is kvrouter's JSON lexer for the readers on the request
// path and for the large documents: router.Parse walks a request body with
// a Lexer (building the chat template's input as it goes), package
// tokenizer a tokenizer.json's model (vocabulary and merges), and
// jinja.FromJSON any document, so whitespace, strings (escapes, surrogate
// pairs, invalid UTF-8), numbers, literals, nesting and trailing data are
// read by the same code, with error messages that give the offset. The
// small sections of the tokenizer files, read once at load, go through
// encoding/json.
//
// The grammar is RFC 8259's, as strictly as encoding/json reads it: only
// space, tab, LF and CR between tokens, no raw control characters in
// strings, no leading zeros, one value per document. Where kvrouter's
// readers must differ, an Options field says how:
//
//   - InvalidUTF8: bytes of a string that are not UTF-8 become U+FFFD each
//     (ReplaceInvalid, as encoding/json and the HF tokenizers' files read
//     by Go), or fail the read (RejectInvalid, as Python's json.loads does
//     on bytes: vLLM refuses such a request body before it parses it).
//   - MaxDepth: how many arrays and objects may be open at once
//     (DefaultMaxDepth, encoding/json's 10,000, when 0).
//
// An escaped UTF-16 surrogate that is not half of a pair (\ud800 alone, or
// followed by anything but a low surrogate escape) reads as U+FFFD in every
// mode, as in encoding/json: a Go string cannot hold it. Python's
// json.loads would keep it (and vLLM then fails to encode it); serde_json,
// which reads tokenizer.json for the HF tokenizers, refuses it.
//
// A Lexer reads values in document order: Peek says what comes next, Str,
// Number, Bool and Null read scalars, Object and Array call back for each
// member or element, Skip and Raw pass over a value of any kind. It never
// allocates on the way except to unescape strings (into a scratch buffer it
// reuses) and for errors.
package jsonlex
