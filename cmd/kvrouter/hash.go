package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// maxHashInput bounds what `kvrouter hash` reads from stdin.
const maxHashInput = 256 << 20

func newHashCommand(s streams) *cobra.Command {
	var c struct {
		Hash blockhash.Config `yaml:"hash"`
	}
	c.Hash = blockhash.DefaultConfig()
	var extra blockhash.Extra
	cmd := &cobra.Command{
		Use:   "hash",
		Short: "Print vLLM block hashes of a JSON token-id array read on stdin",
		Long: `Print the 64-bit prefix-cache hashes vLLM publishes in its KV events for the
token ids read on stdin (a JSON array), one per full block. Tokens after the
last full block are not hashed (vLLM caches full blocks only); their count is
said on stderr. The hash flags are serve's, and must equal the pods' vLLM
settings.`,
		Example: `  echo '[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]' | kvrouter hash --hash-algo sha256_cbor --hash-seed 0 --block-size 16`,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	for _, f := range serveFlagTable { // serve's hash flags
		if strings.HasPrefix(f.Path, "hash.") {
			conf.Table{f}.Bind(fs, &c)
		}
	}
	fs.StringVar(&extra.LoRA, "lora", "", "LoRA adapter name, an extra key of every block")
	fs.StringVar(&extra.CacheSalt, "salt", "", "the request's cache_salt, an extra key of block 0")
	// The names hash had before it shared serve's.
	renamed(fs, "algo", "hash-algo", s.errOut)
	renamed(fs, "seed", "hash-seed", s.errOut)
	cmd.RunE = runE(func(cmd *cobra.Command) error {
		return hashTokens(c.Hash, extra, cmd.InOrStdin(), s.out, s.errOut)
	})
	return cmd
}

// hashTokens reads a JSON array of token ids from stdin and writes the JSON
// array of the 64-bit hashes of every full block, as vLLM publishes them in
// KV events; the tokens left after the last full block are counted on stderr.
func hashTokens(cfg blockhash.Config, extra blockhash.Extra, stdin io.Reader, stdout, stderr io.Writer) error {
	h, err := blockhash.NewHasher(cfg)
	if err != nil {
		// Each problem under the flag of its setting's key.
		var msgs []string
		for _, e := range conf.LeafErrors(err) {
			key, rest, _ := strings.Cut(e.Error(), ":")
			msgs = append(msgs, "--"+serveFlagTable.FlagFor("hash."+key)+":"+rest)
		}
		return badUsage{errors.New(strings.Join(msgs, "\n"))}
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
	if _, err = stdout.Write(append(out, ']', '\n')); err != nil {
		return err
	}
	if rest := len(tokens) % cfg.BlockSize; rest > 0 {
		_, err = fmt.Fprintf(stderr, "kvrouter: hash: %d of %d tokens not hashed: they follow the last full block of %d (vLLM caches full blocks only)\n",
			rest, len(tokens), cfg.BlockSize)
	}
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

// renamed keeps a flag's former name working, hidden from help: it sets the
// flag under its new name and says so on stderr.
func renamed(fs *pflag.FlagSet, from, to string, stderr io.Writer) {
	fs.Var(&formerName{from: from, to: fs.Lookup(to), stderr: stderr}, from, "")
	_ = fs.MarkHidden(from)
}

type formerName struct {
	from   string
	to     *pflag.Flag
	stderr io.Writer
}

func (f *formerName) Set(v string) error {
	fmt.Fprintf(f.stderr, "kvrouter: --%s is now --%s\n", f.from, f.to.Name)
	return f.to.Value.Set(v)
}

func (f *formerName) String() string { return f.to.Value.String() }
func (f *formerName) Type() string   { return f.to.Value.Type() }
