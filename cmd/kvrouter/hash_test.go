package main

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// jsonRange returns the JSON array [0, 1, ..., n-1], spaced irregularly.
func jsonRange(n int) string {
	b := []byte{'['}
	for i := range n {
		if i > 0 {
			b = append(append(b, ','), "  "[:i%3]...)
		}
		b = strconv.AppendInt(b, int64(i), 10)
	}
	return string(append(b, ']'))
}

func TestHash(t *testing.T) {
	tokens48 := jsonRange(48) + "\n"
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantErr    error // nil, errUsage or errBadTokens
		wantStdout string
		wantStderr string
	}{
		// docs/vllm.md §1 known vectors (sha256_cbor, block size 16, tokens 0..47).
		{
			name: "vector seed 0", args: []string{"--hash-algo", "sha256_cbor", "--hash-seed", "0", "--block-size", "16"}, stdin: tokens48,
			wantStdout: "[12687895063098490012,1814341696565857452,2713165534665270607]\n",
		},
		{
			name: "vector lora", args: []string{"--hash-algo=sha256_cbor", "--hash-seed=0", "--lora", "my-lora"}, stdin: tokens48,
			wantStdout: "[14363917845617146483,14169151309622765391,8968918875924509582]\n",
		},
		{
			name: "vector salt", args: []string{"--hash-algo=sha256_cbor", "--hash-seed=0", "--salt", "salt"}, stdin: tokens48,
			wantStdout: "[8471034540256156344,17414453070839758398,15215922227030957406]\n",
		},
		{
			name: "vector empty seed", args: []string{"--hash-algo=sha256_cbor", "--hash-seed="}, stdin: tokens48,
			wantStdout: "[14620552727165982086,2501229464696595326,4995737767712428611]\n",
		},
		{
			name: "the names hash had before", args: []string{"--algo=sha256_cbor", "--seed="}, stdin: tokens48,
			wantStdout: "[14620552727165982086,2501229464696595326,4995737767712428611]\n",
			wantStderr: "kvrouter: --algo is now --hash-algo\nkvrouter: --seed is now --hash-seed\n",
		},
		// docs/vllm.md §1 xxhash vectors (Python's xxhash.xxh3_128_digest).
		{
			name: "xxhash vector seed 0", args: []string{"--hash-algo", "xxhash", "--hash-seed", "0"}, stdin: tokens48,
			wantStdout: "[12446601617588617037,15415768829451575322,9624497515420564099]\n",
		},
		{
			name: "xxhash_cbor vector lora", args: []string{"--hash-algo=xxhash_cbor", "--hash-seed=0", "--lora", "my-lora"}, stdin: tokens48,
			wantStdout: "[1800048193177735191,8423925966018769841,13876067864793695936]\n",
		},
		// Python's pickle + hashlib (see kvindex/testdata/hash_oracle.py).
		{
			name: "defaults: sha256, vllm-none-hash, 16", stdin: jsonRange(40),
			wantStdout: "[3262291359910021016,7142137847444424233]\n",
		},
		{
			name: "sha256 widths lora salt", args: []string{"--hash-seed", "", "--block-size", "1", "--lora", "Alice", "--salt", "s"}, stdin: "[4294967295,0,65536]",
			wantStdout: "[16226342960555616558,1026238868799205110,10613366217779836633]\n",
		},
		{name: "partial block only", stdin: "[1,2,3]", wantStdout: "[]\n", wantStderr: "kvrouter: hash: 3 of 3 tokens not hashed: they follow the last full block of 16"},
		{name: "partial block after full ones", args: []string{"--block-size", "2"}, stdin: "[1,2,3]", wantStdout: "[8547672708782733172]\n", wantStderr: "1 of 3 tokens not hashed"},
		{name: "empty array", stdin: " [ ] ", wantStdout: "[]\n"},

		{name: "block size 0", args: []string{"--block-size", "0"}, wantErr: errUsage, wantStderr: "--block-size: 0, want a block size > 0"},
		{name: "negative block size", args: []string{"--block-size=-4"}, wantErr: errUsage, wantStderr: "--block-size: -4, want a block size > 0"},
		{name: "unknown algo", args: []string{"--hash-algo", "xxhash64"}, wantErr: errUsage, wantStderr: `--hash-algo: "xxhash64", want one of "sha256", "sha256_cbor", "xxhash", "xxhash_cbor"`},
		{name: "bad flag", args: []string{"--nope"}, wantErr: errUsage, wantStderr: "kvrouter: unknown flag: --nope\nSee 'kvrouter hash --help' for usage.\n"},
		{name: "stray argument", args: []string{"tokens.json"}, wantErr: errUsage, wantStderr: `unexpected argument "tokens.json"`},

		{name: "empty stdin", stdin: "", wantErr: errBadTokens},
		{name: "null", stdin: "null", wantErr: errBadTokens},
		{name: "object", stdin: `{"tokens":[1]}`, wantErr: errBadTokens},
		{name: "negative", stdin: "[1,-1]", wantErr: errBadTokens},
		{name: "fraction", stdin: "[1.5]", wantErr: errBadTokens},
		{name: "exponent", stdin: "[1e3]", wantErr: errBadTokens},
		{name: "too big", stdin: "[4294967296]", wantErr: errBadTokens},
		{name: "string", stdin: `["1"]`, wantErr: errBadTokens},
		{name: "nested", stdin: `[[1]]`, wantErr: errBadTokens},
		{name: "trailing garbage", stdin: "[1] [2]", wantErr: errBadTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runWith(t.Context(), append([]string{"hash"}, tt.args...), streams{strings.NewReader(tt.stdin), &stdout, &stderr})
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("hash %q < %.30q = %v, want %v (stderr %q)", tt.args, tt.stdin, err, tt.wantErr, stderr.String())
			}
			if errors.Is(err, errBadTokens) && errors.Is(err, errUsage) {
				t.Errorf("hash %q < %.30q = %v, want a plain error (exit 1), not a usage error", tt.args, tt.stdin, err)
			}
			if got := stdout.String(); got != tt.wantStdout {
				t.Errorf("hash %q < %.30q stdout = %q, want %q", tt.args, tt.stdin, got, tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("hash %q stderr = %q, want it to contain %q", tt.args, stderr.String(), tt.wantStderr)
			}
		})
	}
}

// TestRunHash checks that the hash command is wired into run.
func TestRunHash(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"hash", "--block-size", "0"}, &stdout, &stderr); !errors.Is(err, errUsage) {
		t.Errorf("run(hash --block-size 0) = %v, want %v", err, errUsage)
	}
	if got := stderr.String(); !strings.Contains(got, "See 'kvrouter hash --help' for usage.") || strings.Contains(got, "Usage:") {
		t.Errorf("run(hash --block-size 0) stderr = %q, want the problem and a hint at --help, not the usage", got)
	}
}
