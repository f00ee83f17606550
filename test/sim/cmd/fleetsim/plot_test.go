package main

import (
	"bytes"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// readPlot reads base's PNG, decoded, and SVG, as text.
func readPlot(t *testing.T, base string) (image.Image, string) {
	t.Helper()
	b, err := os.ReadFile(base + ".png")
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("png.Decode(%s.png): %v", base, err)
	}
	svg, err := os.ReadFile(base + ".svg")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "<svg") {
		t.Fatalf("%s.svg has no <svg element", base)
	}
	return img, string(svg)
}

// hasColor says img has a pixel of exactly c.
func hasColor(img image.Image, c color.RGBA) bool {
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				return true
			}
		}
	}
	return false
}

// TestChartSave: a chart becomes a PNG of plotW×plotH at plotDPI, in the
// policies' colors, and an SVG holding its title, both axis names and
// every policy's name. In the SVG a policy draws its line and a marker
// at each point, and a legend entry, its line and marker, even without
// a point.
func TestChartSave(t *testing.T) {
	c := &chart{
		title:  "shared-prefix & test: TTFT p90",
		xLabel: "published QPS of the stage (requests/s)",
		yLabel: "TTFT p90 (s)",
		xs:     []float64{3, 10, 20, 30, 40},
		series: []series{
			{name: "kvrouter", ys: []float64{0.05, 0.06, 0.08, 0.1, 0.2}},
			{name: "random", ys: []float64{0.1, 0.3, 8, 60, 120}},
			{name: "least-loaded", ys: []float64{0.1, math.NaN(), 5, 50, 100}},
			{name: "oracle", ys: []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()}},
		},
	}
	base := filepath.Join(t.TempDir(), "plot")
	if err := c.save(base); err != nil {
		t.Fatal(err)
	}
	img, svg := readPlot(t, base)
	w, h := plotW/vg.Inch*plotDPI, plotH/vg.Inch*plotDPI // pixels
	if got := img.Bounds().Size(); got.X != int(math.Round(float64(w))) || got.Y != int(math.Round(float64(h))) {
		t.Errorf("PNG size = %v, want %gx%g", got, w, h)
	}
	for _, want := range []string{c.title, c.xLabel, c.yLabel + ", log scale", "kvrouter", "random", "least-loaded", "oracle"} {
		if !strings.Contains(svg, ">"+html.EscapeString(want)+"<") {
			t.Errorf("SVG lacks the text %q", want)
		}
	}
	// Each line, marker and legend entry's line and marker is a path of
	// the policy's color; least-loaded's first point, alone, has no line.
	for _, tc := range []struct {
		policy string
		paths  int
	}{{"kvrouter", 1 + 5 + 2}, {"random", 1 + 5 + 2}, {"least-loaded", 1 + 4 + 2}, {"oracle", 2}} {
		st := styleOf(tc.policy)
		hex := fmt.Sprintf("#%02X%02X%02X", st.color.R, st.color.G, st.color.B)
		if n := strings.Count(svg, hex); n != tc.paths {
			t.Errorf("%s: %d paths of its color %s in the SVG, want %d", tc.policy, n, hex, tc.paths)
		}
		if !hasColor(img, st.color) {
			t.Errorf("%s: no pixel of its color %v in the PNG", tc.policy, st.color)
		}
	}
}

// TestChartAxes: an axis is logarithmic exactly when its positive values
// span more than logSpan, over whole decades; a log axis leaves out the
// values ≤ 0 and says how many; a linear metric axis starts at zero.
func TestChartAxes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		xs, ys     []float64
		logX, logY bool
		yLabel     string
		yMin, yMax float64
	}{
		{"narrow", []float64{3, 10, 40}, []float64{20, 50, 80}, false, false, "y", 0, 80},
		{"y spans decades", []float64{1, 2, 4}, []float64{0.03, 0.5, 20}, false, true, "y, log scale", 0.01, 100},
		{"both span decades", []float64{1, 10, 100}, []float64{1, 10, 100}, true, true, "y, log scale", 1, 100},
		{"zero on a log axis", []float64{1, 2, 4}, []float64{0, 0.2, 40}, false, true, "y, log scale (1 point ≤ 0 not shown)", 0.1, 100},
		{"zeros on a log axis", []float64{1, 2, 4, 8}, []float64{0, -1, 0.2, 40}, false, true, "y, log scale (2 points ≤ 0 not shown)", 0.1, 100},
		{"ratio of 30 exactly", []float64{1, 2}, []float64{1, 30}, false, false, "y", 0, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &chart{title: "t", xLabel: "x", yLabel: "y", xs: tc.xs, series: []series{{name: "kvrouter", ys: tc.ys}}}
			p, _ := c.plot()
			_, logX := p.X.Scale.(plot.LogScale)
			_, logY := p.Y.Scale.(plot.LogScale)
			if logX != tc.logX || logY != tc.logY {
				t.Errorf("log x, y = %v, %v; want %v, %v", logX, logY, tc.logX, tc.logY)
			}
			if p.Y.Label.Text != tc.yLabel {
				t.Errorf("y label %q, want %q", p.Y.Label.Text, tc.yLabel)
			}
			if math.Abs(p.Y.Min-tc.yMin) > 1e-12 || math.Abs(p.Y.Max-tc.yMax) > 1e-12 {
				t.Errorf("y range %g..%g, want %g..%g", p.Y.Min, p.Y.Max, tc.yMin, tc.yMax)
			}
			// Drawing must not meet a value ≤ 0 on a log axis (a panic).
			if err := c.save(filepath.Join(t.TempDir(), "p")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDecadeTicks: a label at each power of ten in range, the 2–9
// multiples unlabeled, including from 0.1 (where plot.LogTicks starts at 1).
func TestDecadeTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		labels string
		n      int
	}{
		{0.01, 100, "0.01 0.1 1 10 100", 37},
		{0.1, 10, "0.1 1 10", 19},
		{1e-5, 1e-4, "1e-05 0.0001", 10},
		{0.3, 20, "1 10", 18}, // 0.3 .. 0.9, 1 .. 9, 10, 20
	} {
		var labels []string
		ts := decadeTicks{}.Ticks(tc.lo, tc.hi)
		for _, tk := range ts {
			if tk.Value < tc.lo*(1-1e-9) || tk.Value > tc.hi*(1+1e-9) {
				t.Errorf("%g..%g: tick %g out of range", tc.lo, tc.hi, tk.Value)
			}
			if !tk.IsMinor() {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != tc.labels || len(ts) != tc.n {
			t.Errorf("%g..%g: labels %q of %d ticks, want %q of %d", tc.lo, tc.hi, got, len(ts), tc.labels, tc.n)
		}
	}
}

// TestPolicyStyles: every policy has its own color and its own marker, and
// one the table does not name gets the same style every time.
func TestPolicyStyles(t *testing.T) {
	colors, glyphs := map[any]string{}, map[any]string{}
	for _, p := range fleetsim.Policies {
		st, ok := policyStyles[p]
		if !ok {
			t.Errorf("policy %s has no style", p)
			continue
		}
		if q, dup := colors[st.color]; dup {
			t.Errorf("%s and %s share color %v", p, q, st.color)
		}
		if q, dup := glyphs[st.glyph]; dup {
			t.Errorf("%s and %s share marker %T", p, q, st.glyph)
		}
		colors[st.color], glyphs[st.glyph] = p, p
	}
	if a, b := styleOf("new-policy"), styleOf("new-policy"); a.color != b.color {
		t.Errorf("an unnamed policy's color moves: %v, then %v", a.color, b.color)
	}
}

// TestWritePlots: each figure family gets each metric as a PNG and an SVG
// named as the report links them, TTFT on a log axis when it spans
// decades, the hit ratio on a linear one.
func TestWritePlots(t *testing.T) {
	sc := &scenario{group: sharedPrefix, output: 230, w: &fleetsim.Workload{Name: sharedPrefix + " test", Levels: []fleetsim.Level{{Name: "3"}, {Name: "20"}, {Name: "40"}}}}
	var jobs []*job
	for i, p := range []string{"kvrouter", "random"} {
		var st []fleetsim.Stats
		for k, l := range sc.w.Levels {
			st = append(st, fleetsim.Stats{Level: l.Name, P90: 0.05 * math.Pow(10, float64(i*k)), OutputTPS: 1000, HitRatio: 0.5 - 0.1*float64(i)})
		}
		jobs = append(jobs, &job{sc: sc, policy: p, stats: append(st, fleetsim.Stats{Level: "all"})})
	}
	dir := t.TempDir()
	if err := writePlots(dir, jobs); err != nil {
		t.Fatal(err)
	}
	ps := plotSets(jobs)[0]
	for _, m := range plotMetrics {
		_, svg := readPlot(t, filepath.Join(dir, plotFile(ps, m.suffix)))
		for _, want := range []string{sharedPrefix + " test: " + m.what, "published QPS of the stage (requests/s)", "kvrouter", "random"} {
			if !strings.Contains(svg, ">"+html.EscapeString(want)+"<") {
				t.Errorf("%s.svg lacks %q", plotFile(ps, m.suffix), want)
			}
		}
		wantLog := m.suffix == "ttft-p90"
		if got := strings.Contains(svg, html.EscapeString(m.axis+", log scale")); got != wantLog {
			t.Errorf("%s: log axis %v, want %v", m.suffix, got, wantLog)
		}
	}
}
