package main

import (
	"slices"
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
	steady := func(rss ...int) []soakSample {
		var s []soakSample
		for i, r := range rss {
			s = append(s, soakSample{at: time.Duration(i) * time.Second, rssKB: r << 10, goroutines: 200})
		}
		return s
	}
	if errs := checkGrowth(steady(100, 200, 300, 350, 352, 351, 353, 352, 350)); errs != nil {
		t.Errorf("a filled, steady soak failed: %v", errs)
	}
	if errs := checkGrowth(steady(100, 150, 200, 250, 300, 350, 400, 450, 500)); len(errs) != 1 {
		t.Errorf("RSS growing to the end: %v, want one error", errs)
	}
	leak := steady(300, 300, 300, 300, 300, 300)
	leak[5].goroutines = 300
	if errs := checkGrowth(leak); len(errs) != 1 {
		t.Errorf("goroutines 200 → 300: %v, want one error", errs)
	}
	if errs := checkGrowth(steady(1, 2)); len(errs) != 1 {
		t.Errorf("two samples: %v, want one error", errs)
	}
}
