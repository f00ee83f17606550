package main

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// series is one line of a plot: a policy's value at each x.
type series struct {
	name string
	ys   []float64 // NaN: no point
}

// chart is a line plot of one metric, a series per policy, with a title,
// named axes and a legend beside the data.
type chart struct {
	title, xLabel, yLabel string
	xs                    []float64
	series                []series
}

const (
	// plotW and plotH are a plot's size: the SVG's, and the PNG's at plotDPI.
	plotW, plotH = 9 * vg.Inch, 5 * vg.Inch
	plotDPI      = 100
	// logSpan is the ratio of an axis's largest to smallest positive value
	// above which the axis is logarithmic: its values span decades.
	logSpan = 30
	// plotPad is the white border around a plot, legendGap the space
	// between its data and its legend.
	plotPad, legendGap = vg.Length(8), vg.Length(12)
)

// style is how every plot draws one policy.
type style struct {
	color  color.RGBA
	glyph  draw.GlyphDrawer
	dashes []vg.Length
}

// line is the style of the policy's lines.
func (st style) line() draw.LineStyle {
	return draw.LineStyle{Color: st.color, Width: vg.Points(1.5), Dashes: st.dashes}
}

// marker is the style of the policy's points.
func (st style) marker() draw.GlyphStyle {
	return draw.GlyphStyle{Color: st.color, Shape: st.glyph, Radius: vg.Points(4)}
}

var (
	dotted = []vg.Length{vg.Points(2), vg.Points(2)}
	dashed = []vg.Length{vg.Points(6), vg.Points(3)}
)

// policyStyles gives each policy a color of Okabe and Ito's palette (told
// apart by color-blind readers too; black is left to the axes) and a
// marker, the same in every plot. Random's and kvrouter-mean's lines are
// dotted, round-robin's, the oracle's and kvrouter-learned's dashed, the
// others solid.
var policyStyles = map[string]style{
	"random":        {color.RGBA{204, 121, 167, 255}, hollow{draw.CircleGlyph{}}, dotted},
	"round-robin":   {color.RGBA{230, 159, 0, 255}, hollow{draw.BoxGlyph{}}, dashed},
	"least-loaded":  {color.RGBA{86, 180, 233, 255}, hollow{draw.PyramidGlyph{}}, nil},
	"approximate":   {color.RGBA{0, 158, 115, 255}, draw.PyramidGlyph{}, nil},
	"llm-d-precise": {color.RGBA{240, 228, 66, 255}, draw.CrossGlyph{}, nil},
	"kvrouter":      {color.RGBA{0, 114, 178, 255}, draw.CircleGlyph{}, nil},
	"oracle":        {color.RGBA{213, 94, 0, 255}, draw.BoxGlyph{}, dashed},
	// heterogeneous-speeds' kvrouters: learning speeds in kvrouter's blue, hollow; at the
	// fleet's mean speed in grey, dotted.
	"kvrouter-learned": {color.RGBA{0, 114, 178, 255}, hollow{draw.CircleGlyph{}}, dashed},
	"kvrouter-mean":    {color.RGBA{110, 110, 110, 255}, draw.BoxGlyph{}, dotted},
}

// fleetStyles draw prefill-decode's fleets (pd.go's pdName) in the same palette:
// the aggregated fleet as kvrouter is drawn elsewhere, the P/D fleet's
// thresholds from hopping most to never, the last dotted.
var fleetStyles = map[string]style{
	"aggregated":        policyStyles["kvrouter"],
	pdName(0):           {color.RGBA{213, 94, 0, 255}, draw.BoxGlyph{}, nil},
	pdName(512):         {color.RGBA{0, 158, 115, 255}, draw.PyramidGlyph{}, nil},
	pdName(2048):        {color.RGBA{230, 159, 0, 255}, hollow{draw.BoxGlyph{}}, dashed},
	pdName(math.MaxInt): {color.RGBA{204, 121, 167, 255}, hollow{draw.CircleGlyph{}}, dotted},
}

// spareStyles draw a policy policyStyles does not name, picked by a hash
// of its name so that it too keeps its look from plot to plot.
var spareStyles = []style{
	{color.RGBA{110, 110, 110, 255}, draw.CircleGlyph{}, dotted},
	{color.RGBA{140, 80, 20, 255}, hollow{draw.CircleGlyph{}}, nil},
	{color.RGBA{150, 140, 0, 255}, draw.BoxGlyph{}, nil},
}

// hollow draws its filled glyph with a white middle: an outline thicker
// than draw's outlined glyphs (half a point), that a line through the
// point does not cross.
type hollow struct{ filled draw.GlyphDrawer }

// DrawGlyph draws the glyph in sty's color, then its middle in white.
func (h hollow) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	h.filled.DrawGlyph(c, sty, pt) // in the color draw.Canvas.DrawGlyph set
	c.SetColor(color.White)
	sty.Radius -= vg.Points(1.5)
	h.filled.DrawGlyph(c, sty, pt)
	c.SetColor(sty.Color)
}

// styleOf is the style of the policy or prefill-decode fleet name.
func styleOf(name string) style {
	if s, ok := policyStyles[name]; ok {
		return s
	}
	if s, ok := fleetStyles[name]; ok {
		return s
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name)) // a hash.Hash never fails to write
	return spareStyles[h.Sum32()%uint32(len(spareStyles))]
}

// save writes the chart to base+".png" and base+".svg".
func (c *chart) save(base string) error {
	pngCv := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(plotW, plotH), vgimg.UseDPI(plotDPI))}
	for _, f := range []struct {
		ext string
		cv  vg.CanvasWriterTo
	}{{".png", pngCv}, {".svg", vgsvg.New(plotW, plotH)}} {
		path := base + f.ext
		c.render(draw.New(f.cv))
		if err := writeTo(path, f.cv); err != nil {
			return fmt.Errorf("fleetsim: write plot %s: %w", path, err)
		}
	}
	return nil
}

// writeTo writes w to a new file at path.
func writeTo(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		_ = f.Close() // the write's error is the one to report
		return err
	}
	return f.Close()
}

// render draws the chart on dc: the plot on the left, the legend on the
// right below the title, where it covers no point.
func (c *chart) render(dc draw.Canvas) {
	dc.SetColor(color.White)
	dc.Fill(dc.Path())
	dc = draw.Crop(dc, plotPad, -plotPad, plotPad, -plotPad)
	p, legend := c.plot()
	lw := legend.Rectangle(dc).Size().X + legendGap
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	titleH := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	legend.Draw(draw.Crop(dc, dc.Size().X-lw+legendGap, 0, 0, -titleH))
}

// plot builds the chart's plot and its legend, which the plot does not
// draw itself.
func (c *chart) plot() (*plot.Plot, *plot.Legend) {
	p, legend := plot.New(), plot.NewLegend()
	p.BackgroundColor = nil // render filled the canvas
	p.Title.Text, p.Title.Padding = c.title, vg.Points(6)
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth, legend.Padding = vg.Points(30), vg.Points(3)
	for _, f := range []struct {
		sty  *text.Style
		size float64
	}{{&p.Title.TextStyle, 14}, {&p.X.Label.TextStyle, 12}, {&p.Y.Label.TextStyle, 12}, {&p.X.Tick.Label, 10}, {&p.Y.Tick.Label, 10}, {&legend.TextStyle, 11}} {
		f.sty.Font.Variant, f.sty.Font.Size = "Sans", vg.Points(f.size)
	}
	logX, logY := spansDecades(c.xs), spansDecades(c.allYs())
	var hiddenX, hiddenY int
	p.Add(plotter.NewGrid())
	for _, s := range c.series {
		segs, hx, hy := segments(c.xs, s.ys, logX, logY)
		hiddenX, hiddenY = hiddenX+hx, hiddenY+hy
		st := styleOf(s.name)
		for _, seg := range segs {
			p.Add(&plotter.Line{XYs: seg, LineStyle: st.line()}, &plotter.Scatter{XYs: seg, GlyphStyle: st.marker()})
		}
		// A policy without a point is still in the legend.
		legend.Add(s.name, &plotter.Line{LineStyle: st.line()}, &plotter.Scatter{GlyphStyle: st.marker()})
	}
	setAxis(&p.X, c.xLabel, c.xs, logX, hiddenX)
	setAxis(&p.Y, c.yLabel, c.allYs(), logY, hiddenY)
	if !logY {
		p.Y.Min = min(p.Y.Min, 0) // a linear metric axis starts at zero
	}
	return p, &legend
}

// allYs is every series's values.
func (c *chart) allYs() []float64 {
	var out []float64
	for _, s := range c.series {
		out = append(out, s.ys...)
	}
	return out
}

// setAxis labels a and, when logScale, makes it a log axis over whole decades
// around vs's positive values, saying how many points it leaves out.
func setAxis(a *plot.Axis, label string, vs []float64, logScale bool, hidden int) {
	a.Label.Text = label
	if !logScale {
		return
	}
	lo, hi := positiveRange(vs)
	a.Scale, a.Tick.Marker = plot.LogScale{}, decadeTicks{}
	a.Min, a.Max = math.Pow10(int(math.Floor(math.Log10(lo)+1e-9))), math.Pow10(int(math.Ceil(math.Log10(hi)-1e-9)))
	a.Label.Text += ", log scale"
	switch {
	case hidden == 1:
		a.Label.Text += " (1 point ≤ 0 not shown)"
	case hidden > 1:
		a.Label.Text += fmt.Sprintf(" (%d points ≤ 0 not shown)", hidden)
	}
}

// spansDecades says an axis of vs is logarithmic: its positive values
// span more than logSpan.
func spansDecades(vs []float64) bool {
	lo, hi := positiveRange(vs)
	return hi > 0 && hi/lo > logSpan
}

// positiveRange is the smallest and largest finite positive value of vs;
// +Inf, 0 when there is none.
func positiveRange(vs []float64) (lo, hi float64) {
	lo = math.Inf(1)
	for _, v := range vs {
		if v > 0 && !math.IsInf(v, 1) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	return lo, hi
}

// segments are the runs of drawable points of ys at xs: a NaN, or a value
// ≤ 0 on a log axis, breaks the line. hiddenX and hiddenY count the
// values left out for being ≤ 0 on a log axis.
func segments(xs, ys []float64, logX, logY bool) (segs []plotter.XYs, hiddenX, hiddenY int) {
	var cur plotter.XYs
	for i, y := range ys {
		if i >= len(xs) {
			break
		}
		x := xs[i]
		ok := !math.IsNaN(x) && !math.IsNaN(y) && !math.IsInf(x, 0) && !math.IsInf(y, 0)
		if ok && logX && x <= 0 {
			ok, hiddenX = false, hiddenX+1
		}
		if ok && logY && y <= 0 {
			ok, hiddenY = false, hiddenY+1
		}
		if !ok {
			if len(cur) > 0 {
				segs, cur = append(segs, cur), nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: x, Y: y})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs, hiddenX, hiddenY
}

// decadeTicks marks a log axis: a labeled tick at each power of ten,
// unlabeled ones at its multiples 2 to 9. (plot.LogTicks drops the
// decade below 1 when min is 0.1.)
type decadeTicks struct{}

// Ticks returns the ticks between lo and hi, both > 0.
func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi < lo {
		return nil
	}
	const eps = 1e-9
	var ts []plot.Tick
	for e := int(math.Floor(math.Log10(lo) + eps)); e <= int(math.Ceil(math.Log10(hi)-eps)); e++ {
		d := math.Pow10(e)
		for m := 1; m <= 9; m++ {
			v := d * float64(m)
			if v < lo*(1-eps) || v > hi*(1+eps) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = decadeLabel(e)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// decadeLabel prints 10^e: 0.001 to 1000000 in full, others as %g does
// (0.0001, 1e-05, 1e+07).
func decadeLabel(e int) string {
	if e >= -3 && e <= 6 {
		return strconv.FormatFloat(math.Pow10(e), 'f', -1, 64)
	}
	return strconv.FormatFloat(math.Pow10(e), 'g', -1, 64)
}

// percentiles are the x values of the plots by percentile
// (prefill-decode, heterogeneous-speeds).
var percentiles = []float64{10, 25, 50, 75, 90, 95, 99}

// percentileChart is a chart of a per-request metric (its axis label
// yLabel) by percentile.
func percentileChart(title, yLabel string) *chart {
	return &chart{title: title, xLabel: "percentile of requests", yLabel: yLabel, xs: percentiles}
}

// ttftOf is a request's time to first token, a percentile chart's value.
func ttftOf(o fleetsim.Outcome) (float64, bool) { return o.First - o.Arrival, true }

// percentileSeries is the line of value over the requests that got their
// whole answer in rs, pooled, at percentiles.
func percentileSeries(name string, value func(fleetsim.Outcome) (float64, bool), rs ...*fleetsim.Result) series {
	var vs []float64
	for _, r := range rs {
		for _, o := range r.Outcomes {
			if v, ok := value(o); ok && o.Finish > 0 && !o.TimedOut {
				vs = append(vs, v)
			}
		}
	}
	slices.Sort(vs)
	s := series{name: name}
	for _, p := range percentiles {
		s.ys = append(s.ys, percentile(vs, p))
	}
	return s
}

// percentile is the p-th percentile of sorted vs, nearest rank; NaN of
// none.
func percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(vs)))) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}

// workloadFile is the base name, from prefix, of a plot of the Mooncake
// or the shared-prefix workload named name.
func workloadFile(prefix, name string) string {
	if strings.Contains(name, "mooncake") {
		return prefix + "-mooncake"
	}
	return prefix + "-shared"
}
