// Package jinja is a Jinja template interpreter with the semantics of Python
// jinja2 as transformers configures it for chat templates
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
// controls): ordered dicts, Python printing of None/True/floats, int versus
// float arithmetic, code-point strings, the sandbox's refusal of unsafe
// attributes, and errors where jinja2 raises them.
//
// # Overview
//
// [Compile] turns template source into a [Template]; [Template.Render]
// evaluates it against a context of [Value]s ([FromJSON] builds them from
// JSON with object key order kept, [DecodeJSON] from one value of a
// document another reader walks with the same lexer). A compiled Template
// is immutable and may render concurrently; [Cache] keeps compiled
// templates by source.
//
// # Limits
//
// Hostile templates and inputs stay bounded: [Limits] caps the output size,
// the loop iterations, the macro call depth and the parse nesting, and every
// limit is reported as an error wrapping [ErrLimit]. The interpreter never
// panics and never overflows the Go stack.
package jinja
