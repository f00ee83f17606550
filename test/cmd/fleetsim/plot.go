package main

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
)

// series is one line of a plot: a policy's value at each x.
type series struct {
	name  string
	color color.RGBA
	ys    []float64 // NaN: no point
}

// chart is a line plot with numbered axes. The legend is in the report's
// text (names and colors), as the plot has no font for words.
type chart struct {
	xs     []float64
	series []series
	logY   bool
}

const (
	plotW, plotH = 720, 420
	marginL      = 70
	marginR      = 20
	marginT      = 20
	marginB      = 50
)

// palette gives each policy a color the report names.
var palette = []struct {
	name string
	c    color.RGBA
}{
	{"red", color.RGBA{220, 40, 40, 255}},
	{"orange", color.RGBA{240, 150, 20, 255}},
	{"purple", color.RGBA{140, 60, 200, 255}},
	{"blue", color.RGBA{30, 100, 230, 255}},
	{"green", color.RGBA{20, 160, 60, 255}},
	{"black", color.RGBA{0, 0, 0, 255}},
	{"cyan", color.RGBA{0, 190, 200, 255}},
}

// encode draws the chart as a PNG.
func (c *chart) encode(w io.Writer) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	ymin, ymax := c.yRange()
	xmin, xmax := c.xs[0], c.xs[len(c.xs)-1]
	if xmax == xmin {
		xmax = xmin + 1
	}
	px := func(x float64) int {
		return marginL + int(math.Round((x-xmin)/(xmax-xmin)*float64(plotW-marginL-marginR)))
	}
	py := func(y float64) int {
		if c.logY {
			y = math.Log10(max(y, ymin))
		}
		return plotH - marginB - int(math.Round((y-ymin)/(ymax-ymin)*float64(plotH-marginT-marginB)))
	}
	grey, black := color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}
	for _, t := range c.yTicks(ymin, ymax) {
		y := py(t.v)
		line(img, marginL, y, plotW-marginR, y, grey, 1)
		text(img, marginL-6-textWidth(t.label), y-5, t.label, black)
	}
	for i, x := range c.xs {
		if len(c.xs) > 12 && i%2 == 1 {
			continue // every other label when crowded
		}
		l := strconv.FormatFloat(x, 'g', 4, 64)
		text(img, px(x)-textWidth(l)/2, plotH-marginB+8, l, black)
	}
	line(img, marginL, marginT, marginL, plotH-marginB, black, 1)
	line(img, marginL, plotH-marginB, plotW-marginR, plotH-marginB, black, 1)
	for _, s := range c.series {
		prev := -1
		for i, y := range s.ys {
			if math.IsNaN(y) || (c.logY && y <= 0) {
				prev = -1
				continue
			}
			if prev >= 0 {
				line(img, px(c.xs[prev]), py(s.ys[prev]), px(c.xs[i]), py(y), s.color, 2)
			}
			dot(img, px(c.xs[i]), py(y), s.color)
			prev = i
		}
	}
	return png.Encode(w, img)
}

// yRange is the y axis span (in log10 units for a log axis).
func (c *chart) yRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.series {
		for _, y := range s.ys {
			if math.IsNaN(y) || (c.logY && y <= 0) {
				continue
			}
			lo, hi = min(lo, y), max(hi, y)
		}
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	if c.logY {
		return math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi) + 1e-9)
	}
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi * 1.05
}

type tick struct {
	v     float64
	label string
}

func (c *chart) yTicks(lo, hi float64) []tick {
	var ts []tick
	if c.logY {
		for e := lo; e <= hi+1e-9; e++ {
			ts = append(ts, tick{math.Pow(10, e), strconv.FormatFloat(math.Pow(10, e), 'g', -1, 64)})
		}
		return ts
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/4)))
	for (hi-lo)/step > 8 {
		step *= 2
	}
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ts = append(ts, tick{v, shortNumber(v)})
	}
	return ts
}

// shortNumber prints 12000 as 12k.
func shortNumber(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int) {
	n := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= n; i++ {
		x := x0 + (x1-x0)*i/n
		y := y0 + (y1-y0)*i/n
		for dx := range width {
			for dy := range width {
				img.SetRGBA(x+dx, y+dy, c)
			}
		}
	}
}

func dot(img *image.RGBA, x, y int, c color.RGBA) {
	for dx := -2; dx <= 2; dx++ {
		for dy := -2; dy <= 2; dy++ {
			img.SetRGBA(x+dx, y+dy, c)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// glyphs is a 3×5 pixel font for the characters of axis labels.
var glyphs = map[rune][5]string{
	'0': {"###", "#.#", "#.#", "#.#", "###"},
	'1': {".#.", "##.", ".#.", ".#.", "###"},
	'2': {"###", "..#", "###", "#..", "###"},
	'3': {"###", "..#", "###", "..#", "###"},
	'4': {"#.#", "#.#", "###", "..#", "..#"},
	'5': {"###", "#..", "###", "..#", "###"},
	'6': {"###", "#..", "###", "#.#", "###"},
	'7': {"###", "..#", "..#", "..#", "..#"},
	'8': {"###", "#.#", "###", "#.#", "###"},
	'9': {"###", "#.#", "###", "..#", "###"},
	'.': {"...", "...", "...", "...", ".#."},
	'-': {"...", "...", "###", "...", "..."},
	'e': {"...", "###", "###", "#..", "###"},
	'k': {"#..", "#.#", "##.", "#.#", "#.#"},
	'+': {"...", ".#.", "###", ".#.", "..."},
}

const glyphScale = 2

func textWidth(s string) int { return len(s) * 4 * glyphScale }

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for i, r := range s {
		g, ok := glyphs[r]
		if !ok {
			continue
		}
		for row, bits := range g {
			for col, b := range bits {
				if b != '#' {
					continue
				}
				for dx := range glyphScale {
					for dy := range glyphScale {
						img.SetRGBA(x+i*4*glyphScale+col*glyphScale+dx, y+row*glyphScale+dy, c)
					}
				}
			}
		}
	}
}
