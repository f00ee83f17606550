package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// benchTexts are the throughput texts: prose and code documents of 2k to
// 40k characters from the corpus.
func benchTexts() []string {
	docs := corpus()
	return docs[len(docs)-7 : len(docs)-2]
}

// prompt8k returns a prompt of about 8,192 tokens for tok.
func prompt8k(b *testing.B, tok *Tokenizer) string {
	var sb strings.Builder
	for _, d := range benchTexts() {
		sb.WriteString(d)
	}
	s := sb.String()
	ids, err := tok.Encode(s, false)
	if err != nil || len(ids) < 8192 {
		b.Fatalf("bench text has %d tokens (%v), want 8192+", len(ids), err)
	}
	return s[:len(s)*8192/len(ids)]
}

// BenchmarkEncode measures one goroutine encoding the bench texts, cold
// (a fresh word cache every pass) and warm, and an 8k-token prompt.
// BenchmarkOracle runs the Rust tokenizers on the same texts.
//
// Measured 2026-11-21, Go 1.26, nproc = 2 shared with other work:
// go test ./tokenizer -run '^$' -bench 'Encode|Oracle|Load' -benchmem
//
//	model        Go cold MB/s  Go warm MB/s  Rust MB/s   8k prompt   load     heap
//	(filled in below by the numbers of the latest run)
func BenchmarkEncode(b *testing.B) {
	texts := benchTexts()
	size := 0
	for _, s := range texts {
		size += len(s)
	}
	for _, model := range models {
		tok := loadModel(b, model)
		ntok := 0
		for _, s := range texts {
			ids, _ := tok.Encode(s, false)
			ntok += len(ids)
		}
		for _, mode := range []string{"cold", "warm"} {
			b.Run(model+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				var dst []uint32
				for b.Loop() {
					if mode == "cold" {
						tok.cache = newWordCache()
					}
					for _, s := range texts {
						dst, _ = tok.AppendEncode(dst[:0], s, false)
					}
				}
				b.ReportMetric(float64(ntok)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
		b.Run(model+"/8k-prompt", func(b *testing.B) {
			p := prompt8k(b, tok)
			b.SetBytes(int64(len(p)))
			var dst []uint32
			for b.Loop() {
				tok.cache = newWordCache()
				dst, _ = tok.AppendEncode(dst[:0], p, true)
			}
		})
	}
}

// BenchmarkOracle reports the Rust tokenizers' throughput on the bench texts
// (one node process per model, timed inside node).
func BenchmarkOracle(b *testing.B) {
	var in bytes.Buffer
	for _, s := range benchTexts() {
		line, _ := json.Marshal(s)
		in.Write(append(line, '\n'))
	}
	for _, model := range models {
		b.Run(model, func(b *testing.B) {
			cmd := exec.Command("node", filepath.Join("testdata", "bench.js"), modelDir(b, model))
			cmd.Stdin = bytes.NewReader(in.Bytes())
			cmd.Env = append(os.Environ(), "ORACLE_NODE_MODULES="+oracleModules(b))
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("bench.js %s: %v", model, err)
			}
			var res struct {
				MBPerSec     float64 `json:"mb_per_sec"`
				TokensPerSec float64 `json:"tokens_per_sec"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.MBPerSec, "MB/s")
			b.ReportMetric(res.TokensPerSec, "tokens/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkLoad measures loading each model and the heap it keeps.
func BenchmarkLoad(b *testing.B) {
	for _, model := range models {
		b.Run(model, func(b *testing.B) {
			dir := modelDir(b, model)
			var heap uint64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tok, err := Load(dir)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap = after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(tok)
			}
			b.ReportMetric(float64(heap)/1e6, "heap-MB")
		})
	}
}
