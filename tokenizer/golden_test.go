package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

var update = flag.Bool("update", false, "regenerate testdata/corpus.jsonl.gz and testdata/golden/ with the oracle")

// oracleVersion is the npm tokenizers version the goldens were made with.
const oracleVersion = "tokenizers@0.23.2"

const (
	corpusFile  = "testdata/corpus.jsonl.gz"
	goldenDir   = "testdata/golden"
	versionFile = "testdata/golden/VERSION"
	fullMarker  = 1 << 30
)

// TestOracleGolden compares every model's encoding of the whole corpus, with
// and without special tokens, to the committed oracle output.
func TestOracleGolden(t *testing.T) {
	if *update {
		regenerate(t)
	}
	texts := readCorpus(t)
	checkVersion(t, texts)
	for _, model := range oracle.Models {
		t.Run(model, func(t *testing.T) {
			t.Parallel() // also proves concurrent use under -race
			tok := loadModel(t, model)
			want := readGolden(t, model, len(texts))
			compare(t, model, tok, texts, want)
		})
	}
}

// TestOracleLive runs the real tokenizers on a sample of the corpus, so a
// stale golden cannot hide a regression.
func TestOracleLive(t *testing.T) {
	texts := readCorpus(t)
	var sample []string
	for i, s := range texts {
		if i%29 == 0 || i < 40 {
			sample = append(sample, s)
		}
	}
	for _, model := range oracle.Models {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			tok := loadModel(t, model)
			compare(t, model, tok, sample, oracleIDs(t, model, sample))
		})
	}
}

func corpusDigest(texts []string) string {
	h := sha256.New()
	for _, s := range texts {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func versionText(texts []string) string {
	return fmt.Sprintf("oracle %s\ncorpus %s %d texts\nregenerate: go test ./tokenizer -run TestOracleGolden -update\n",
		oracleVersion, corpusDigest(texts), len(texts))
}

func checkVersion(t *testing.T, texts []string) {
	t.Helper()
	got, err := os.ReadFile(versionFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := versionText(texts); string(got) != want {
		t.Fatalf("%s = %q, want %q: regenerate the goldens", versionFile, got, want)
	}
}

func regenerate(t *testing.T) {
	texts := corpus()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for _, s := range texts {
		b, _ := json.Marshal(s)
		_, err := zw.Write(append(b, '\n'))
		must(t, err)
	}
	must(t, zw.Close())
	must(t, os.WriteFile(corpusFile, buf.Bytes(), 0o644))
	must(t, os.MkdirAll(goldenDir, 0o755))
	for _, model := range oracle.Models {
		ids := oracleIDs(t, model, texts)
		must(t, os.WriteFile(filepath.Join(goldenDir, model+".bin.gz"), encodeGolden(ids), 0o644))
	}
	must(t, os.WriteFile(versionFile, []byte(versionText(texts)), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// encodeGolden writes per text: the ids without special tokens, then the
// ids with them as prefix and suffix around those (or, marked, in full), all
// uvarints, gzipped.
func encodeGolden(all [][2][]uint32) []byte {
	var raw []byte
	put := func(ids []uint32) {
		raw = binary.AppendUvarint(raw, uint64(len(ids)))
		for _, id := range ids {
			raw = binary.AppendUvarint(raw, uint64(id))
		}
	}
	for _, p := range all {
		put(p[0])
		pre, suf, ok := around(p[1], p[0])
		if ok {
			put(pre)
			put(suf)
		} else {
			raw = binary.AppendUvarint(raw, fullMarker)
			put(p[1])
		}
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(raw); err != nil {
		panic(err) // a bytes.Buffer does not fail
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// around finds pre and suf with special = pre + ids + suf.
func around(special, ids []uint32) (pre, suf []uint32, ok bool) {
	for i := 0; i+len(ids) <= len(special); i++ {
		if slices.Equal(special[i:i+len(ids)], ids) {
			return special[:i], special[i+len(ids):], true
		}
	}
	return nil, nil, false
}

func readGolden(t *testing.T, model string, n int) [][2][]uint32 {
	t.Helper()
	f, err := os.Open(filepath.Join(goldenDir, model+".bin.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(zr)
	list := func(k uint64) []uint32 {
		ids := make([]uint32, k)
		for i := range ids {
			v, err := binary.ReadUvarint(r)
			must(t, err)
			ids[i] = uint32(v)
		}
		return ids
	}
	count := func() uint64 {
		v, err := binary.ReadUvarint(r)
		must(t, err)
		return v
	}
	out := make([][2][]uint32, n)
	for i := range out {
		ids := list(count())
		out[i][0] = ids
		k := count()
		if k == fullMarker {
			out[i][1] = list(count())
			continue
		}
		pre := list(k)
		suf := list(count())
		out[i][1] = slices.Concat(pre, ids, suf)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s golden has more than %d entries", model, n)
	}
	return out
}

func readCorpus(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 16<<20)
	var texts []string
	for sc.Scan() {
		var s string
		must(t, json.Unmarshal(sc.Bytes(), &s))
		texts = append(texts, s)
	}
	must(t, sc.Err())
	if len(texts) == 0 || strings.TrimSpace(texts[len(texts)-1]) == "" {
		t.Fatalf("%s: empty or truncated", corpusFile)
	}
	return texts
}
