package redisindex

import (
	"bufio"
	"bytes"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
)

// fuzzIndex is an index with no server: the reply parsers only.
func fuzzIndex(t testing.TB) *Index {
	t.Helper()
	return testIndex(t, "127.0.0.1:1", prometheus.NewRegistry(), func(cfg *Config) { cfg.MaxHolders = 4 })
}

// FuzzRawReplies feeds arbitrary bytes to a match's reply parser, as a
// server (or anything listening at its address) could send them: no
// panic, and every value it keeps lies in the arena and has the shape it
// checked.
func FuzzRawReplies(f *testing.F) {
	rec := string(appendRecord(nil, 1, 0, 1, 7))
	for _, seed := range []string{
		"*2\r\n$3\r\n1:7\r\n$-1\r\n*0\r\n*2\r\n$16\r\n" + rec + "\r\n$-1\r\n*1\r\n$-1\r\n",
		"-WRONGTYPE x\r\n*0\r\n-ERR\r\n*1\r\n:1\r\n",
		"*2\r\n$3\r\n1:7\r\n$99999999\r\nab",
		"*-1\r\n",
		"*2\r\n$1\r\n",
		"*2\r\n+OK\r\n$0\r\n\r\n*2\r\n$3\r\nx|y\r\n$5\r\n1:1:1\r\n",
	} {
		f.Add([]byte(seed))
	}
	x := fuzzIndex(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := &matchScratch{bigNum: map[uint32]int32{}, byName: map[string]int32{}}
		sc.names, sc.cand = []string{"p1", "p2"}, []int{0, 1}
		sc.members = [][]int32{{0, 2}, {1}}
		sc.tab, sc.vals = make([]span, 2), make([]span, 3)
		sc.withLoad = true
		c := &rawConn{r: bufio.NewReaderSize(bytes.NewReader(data), 64)}
		if err := x.readRawReplies(c, sc); err != nil {
			return // a failed round trip: Redis is marked down, nothing is read
		}
		for _, sp := range append(append(append([]span(nil), sc.tab...), sc.vals...), sc.loadSpans...) {
			if sp.n >= 0 && int(sp.off)+int(sp.n) > len(sc.arena) {
				t.Fatalf("span %+v outside the arena of %d bytes", sp, len(sc.arena))
			}
		}
		for _, sp := range sc.vals {
			if sp.n >= 0 && (sp.n%recordSize != 0 || int(sp.n) > x.cfg.MaxHolders*recordSize) {
				t.Fatalf("block value span %+v kept, want whole records within the holder bound", sp)
			}
		}
		if !sc.tableErr && x.readTable(sc) {
			out := make([]kvindex.PodMatch, 2)
			x.count(sc, []uint64{1, 2, 3}, out)
			for _, o := range out {
				if o.Blocks > 3 {
					t.Fatalf("a candidate matched %d of 3 blocks", o.Blocks)
				}
			}
			x.readLoad(sc, make([]replica.PodLoad, 2))
		}
	})
}

// TestGarbageServer: a server answering garbage fails the round trip
// (Redis marked down, counted) and the match reads the local view; it is
// never taken for an answer.
func TestGarbageServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err == nil {
					_, _ = c.Write([]byte("*1\r\n$16\r\nnot a record, no\r\n?garbage\r\n"))
				}
			}()
		}
	}()
	kcfg := kvindex.DefaultConfig()
	local, err := kvindex.New(kcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addrs, cfg.Timeout = []string{l.Addr().String()}, time.Second
	x, err := New(cfg, local, kcfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = x.close() }()
	p1 := x.AddPod("p1", "m")
	must(t, x.local.Stored(p1, kvindex.TierGPU, blocks[:2]))
	got := x.Match("m", blocks, []kvindex.PodID{p1}, nil)
	if got[0].Blocks != 2 {
		t.Errorf("Match = %+v, want the local view's 2 blocks", got[0])
	}
	if up, _ := x.Up(); up {
		t.Error("Redis still up after a garbage reply")
	}
	if n := testutil.ToFloat64(x.metrics.errors.WithLabelValues("match")); n != 1 {
		t.Errorf("errors{op=match} = %v, want 1", n)
	}
}
