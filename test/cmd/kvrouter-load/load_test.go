package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestInts(t *testing.T) {
	got, err := ints("500, 8000,0")
	if err != nil || !slices.Equal(got, []int{500, 8000, 0}) {
		t.Errorf("ints = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1,,2", "-1", "x"} {
		if _, err := ints(bad); err == nil {
			t.Errorf("ints(%q) = nil error", bad)
		}
	}
}

func TestCheckGrowth(t *testing.T) {
	// steady samples: the index full from the start, the prefix caches
	// filling over the first fill samples.
	steady := func(fill int, rss ...int) []soakSample {
		var s []soakSample
		for i, r := range rss {
			s = append(s, soakSample{
				at: time.Duration(i) * time.Second, rssKB: r << 10, heap: r << 20, goroutines: 200, entries: 1000,
				prefixBytes: 64, prefixBudget: 64,
			})
			if i < fill {
				s[i].prefixBytes = float64(i) / float64(fill) * 64
			}
		}
		return s
	}
	if errs, note := checkGrowth(steady(0, 100, 200, 300, 350, 352, 351, 353, 352, 350)); errs != nil || note != "" {
		t.Errorf("a filled, steady soak failed: %v %q", errs, note)
	}
	if errs, _ := checkGrowth(steady(0, 100, 150, 200, 250, 300, 350, 400, 450, 500)); len(errs) != 1 {
		t.Errorf("RSS growing to the end: %v, want one error", errs)
	}
	// The prefix caches fill in the last third: the growth is theirs, and
	// judged only from when they are full.
	filling := steady(6, 300, 300, 300, 300, 300, 300, 330, 360, 360, 361, 360, 360, 362, 361)
	if errs, note := checkGrowth(filling); errs != nil || note != "" {
		t.Errorf("caches filling late, then steady: %v %q", errs, note)
	}
	if errs, note := checkGrowth(steady(20, 300, 300, 300, 300, 300, 300, 330, 360)); errs != nil || note == "" {
		t.Errorf("caches never full: %v %q, want no error and a note", errs, note)
	}
	// A workload of few prompts: the prefix caches hold them all, far
	// below their budget, from the start; the index fills in the first
	// half.
	few := steady(0, 100, 150, 200, 250, 300, 350, 360, 360, 361, 360, 362, 361)
	for i := range few {
		few[i].prefixBytes, few[i].entries = 0.1, min(1000, i*200)
	}
	if errs, note := checkGrowth(few); errs != nil || note != "" {
		t.Errorf("few prompts, the index full from the middle: %v %q", errs, note)
	}
	leaky := steady(6, 300, 300, 300, 300, 300, 300, 330, 360, 380, 400, 420, 440, 460, 480)
	if errs, _ := checkGrowth(leaky); len(errs) != 1 {
		t.Errorf("RSS growing with the caches full: %v, want one error", errs)
	}
	leak := steady(0, 300, 300, 300, 300, 300, 300)
	leak[5].goroutines = 300
	if errs, _ := checkGrowth(leak); len(errs) != 1 {
		t.Errorf("goroutines 200 → 300: %v, want one error", errs)
	}
	if errs, _ := checkGrowth(steady(0, 1, 2)); len(errs) != 1 {
		t.Errorf("two samples: %v, want one error", errs)
	}
}

func TestCheckMemory(t *testing.T) {
	const mib = 1 << 20
	samples := []soakSample{{heap: 150 * mib}, {heap: 300 * mib}}
	// Live bound: 100 MiB + 1M × 50 B (47.7 MiB) + 128 MiB + 95 MiB ≈ 368 MiB;
	// RSS bound: 20 MiB outside the heap + twice that.
	if errs := checkMemory(samples, 100*mib, 120<<10, 1<<20, 128*mib, 700<<10, io.Discard); errs != nil {
		t.Errorf("within both bounds: %v", errs)
	}
	if errs := checkMemory(append(samples, soakSample{heap: 400 * mib}), 100*mib, 120<<10, 1<<20, 128*mib, 700<<10, io.Discard); len(errs) != 1 {
		t.Errorf("live heap over its bound: %v, want one error", errs)
	}
	if errs := checkMemory(samples, 100*mib, 120<<10, 1<<20, 128*mib, 800<<10, io.Discard); len(errs) != 1 {
		t.Errorf("RSS over its bound: %v, want one error", errs)
	}
	if errs := checkMemory([]soakSample{{heap: -1}}, -1, 120<<10, 1<<20, 128*mib, 700<<10, io.Discard); len(errs) != 1 {
		t.Errorf("no heap read: %v, want one error", errs)
	}
}

func TestBodyModeFlag(t *testing.T) {
	err := run(t.Context(), []string{"-body-mode", "STREAMED"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-body-mode") {
		t.Errorf("run with -body-mode STREAMED = %v, want a -body-mode error", err)
	}
}
