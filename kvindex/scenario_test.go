package kvindex

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/scenarios/*.txt")

// TestScenarios runs the scripts in testdata/scenarios. A script is a list of
// commands, one per line; commands that print are followed by a "----" line
// and the expected output, up to a blank line. Commands:
//
//	pod NAME MODEL              register a pod
//	remove-pod NAME             remove it
//	stored NAME TIER H...       a BlockStored event
//	removed NAME TIER H...      a BlockRemoved event
//	speculate NAME H...         a routing decision's speculative entries
//	settle NAME H...            its request was prefilled: shorten them
//	clear NAME                  AllBlocksCleared / pod restarted
//	clear-tier NAME TIER        drop one tier of a pod
//	advance DURATION            move the clock
//	sweep                       free expired speculative entries
//	match MODEL NAME,NAME H...  prints each candidate's match
//	entries                     prints the entry counts
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScenario(t, file) })
	}
}

func runScenario(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sr := &scenario{t: t, now: time.Unix(0, 0), pods: map[string]PodID{}}
	sr.x = mustNew(t, Config{Shards: 4, MaxEntries: 1000, SpeculativeTTL: 2 * time.Second, SpeculativeGrace: 500 * time.Millisecond, Now: func() time.Time { return sr.now }}, nil)
	lines := strings.Split(string(data), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line + "\n")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		got := sr.do(fmt.Sprintf("%s:%d", file, i+1), strings.Fields(line))
		if i+1 >= len(lines) || lines[i+1] != "----" {
			if got != "" {
				t.Fatalf("%s:%d: %q prints output but has no ---- section:\n%s", file, i+1, line, got)
			}
			continue
		}
		j := i + 2
		for j < len(lines) && lines[j] != "" {
			j++
		}
		want := strings.Join(lines[i+2:j], "\n")
		if strings.TrimSpace(want) != "" {
			want += "\n"
		}
		if got != want && !*rewrite {
			t.Errorf("%s:%d: %s\ngot:\n%swant:\n%s", file, i+1, line, got, want)
		}
		out.WriteString("----\n" + got)
		i = j - 1
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkInvariants(t, sr.x)
}

type scenario struct {
	t    *testing.T
	x    *Index
	now  time.Time
	pods map[string]PodID
}

func (sr *scenario) do(where string, f []string) string {
	t := sr.t
	need := func(n int) {
		if len(f) < n {
			t.Fatalf("%s: %s needs %d arguments", where, f[0], n-1)
		}
	}
	check := func(err error) {
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	}
	switch f[0] {
	case "pod":
		need(3)
		sr.pods[f[1]] = sr.x.AddPod(f[1], f[2])
	case "remove-pod":
		need(2)
		check(sr.x.RemovePod(sr.pods[f[1]]))
	case "stored", "removed":
		need(4)
		op := sr.x.Stored
		if f[0] == "removed" {
			op = sr.x.Removed
		}
		check(op(sr.pods[f[1]], ParseTier(f[2]), sr.hashes(where, f[3:])))
	case "speculate":
		need(3)
		check(sr.x.Speculate(sr.pods[f[1]], sr.hashes(where, f[2:])))
	case "settle":
		need(3)
		check(sr.x.Settle(sr.pods[f[1]], sr.hashes(where, f[2:])))
	case "clear":
		need(2)
		check(sr.x.ClearPod(sr.pods[f[1]]))
	case "clear-tier":
		need(3)
		check(sr.x.ClearTier(sr.pods[f[1]], ParseTier(f[2])))
	case "advance":
		need(2)
		d, err := time.ParseDuration(f[1])
		check(err)
		sr.now = sr.now.Add(d)
	case "sweep":
		sr.x.Sweep()
	case "match":
		need(4)
		return sr.match(where, f[1], strings.Split(f[2], ","), f[3:])
	case "entries":
		r, s := sr.x.Len()
		return fmt.Sprintf("real=%d speculative=%d\n", r, s)
	default:
		t.Fatalf("%s: unknown command %q", where, f[0])
	}
	return ""
}

func (sr *scenario) hashes(where string, args []string) []uint64 {
	hs := make([]uint64, len(args))
	for i, a := range args {
		h, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			sr.t.Fatalf("%s: hash %q: %v", where, a, err)
		}
		hs[i] = h
	}
	return hs
}

func (sr *scenario) match(where, model string, names, args []string) string {
	cands := make([]PodID, len(names))
	for i, n := range names {
		id, ok := sr.pods[n]
		if !ok {
			id = InvalidPod
		}
		cands[i] = id
	}
	var b strings.Builder
	for i, m := range sr.x.Match(model, sr.hashes(where, args), cands, nil) {
		fmt.Fprintf(&b, "%s: %d", names[i], m.Blocks)
		var parts []string
		for t, n := range m.Tiers {
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", Tier(t), n))
			}
		}
		if m.Speculative > 0 {
			parts = append(parts, fmt.Sprintf("spec=%d", m.Speculative))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(parts, " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}
