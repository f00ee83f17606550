package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// maxHashInput bounds what `kvrouter hash` reads from stdin.
const maxHashInput = 256 << 20

func runHash(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return hashTokens(args, os.Stdin, stdout, stderr)
}

// hashTokens is `kvrouter hash` with its input as an argument: it reads a
// JSON array of token ids from stdin and writes the JSON array of the 64-bit
// hashes of every full block, as vLLM publishes them in KV events.
func hashTokens(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg := blockhash.DefaultConfig()
	var algo string
	var extra blockhash.Extra
	fs := newFlagSet("hash", "--algo sha256|sha256_cbor --seed S --block-size N [--lora NAME] [--salt SALT] < tokens.json", stderr)
	fs.StringVar(&algo, "algo", string(cfg.Algorithm), "vLLM's --prefix-caching-hash-algo: sha256 or sha256_cbor")
	fs.StringVar(&cfg.Seed, "seed", cfg.Seed, "vLLM's PYTHONHASHSEED (the empty string is a seed too)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per KV-cache block")
	fs.StringVar(&extra.LoRA, "lora", "", "LoRA adapter name, an extra key of every block")
	fs.StringVar(&extra.CacheSalt, "salt", "", "the request's cache_salt, an extra key of block 0")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	cfg.Algorithm = blockhash.Algorithm(algo)
	h, err := blockhash.NewHasher(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter hash: %v\n", err)
		fs.Usage()
		return errUsage
	}
	tokens, err := readTokenIDs(stdin)
	if err != nil {
		return fmt.Errorf("hash: stdin: %w", err)
	}
	out := []byte{'['}
	for i, v := range h.AppendHashes(nil, tokens, extra) {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, v, 10)
	}
	_, err = stdout.Write(append(out, ']', '\n'))
	return err
}

// errBadTokens is returned for stdin that is not a JSON array of token ids.
var errBadTokens = errors.New("want a JSON array of token ids (integers from 0 to 4294967295)")

// readTokenIDs reads a JSON array of integers in [0, 2^32) from r.
func readTokenIDs(r io.Reader) ([]uint32, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxHashInput+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxHashInput {
		return nil, fmt.Errorf("more than %d bytes: %w", maxHashInput, errBadTokens)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadTokens, err)
	}
	if raw == nil {
		return nil, errBadTokens // null
	}
	tokens := make([]uint32, len(raw))
	for i, m := range raw {
		v, err := strconv.ParseUint(string(m), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("element %d is %.40s: %w", i, m, errBadTokens)
		}
		tokens[i] = uint32(v)
	}
	return tokens, nil
}
