package main

import (
	"bytes"
	"image/png"
	"math"
	"testing"
)

func TestChartDrawsEachSeries(t *testing.T) {
	red, blue := palette[0].c, palette[3].c
	c := &chart{
		xs:   []float64{1, 2, 3},
		logY: true,
		series: []series{
			{name: "a", color: red, ys: []float64{0.01, 0.1, 100}},
			{name: "b", color: blue, ys: []float64{1, math.NaN(), 2}},
		},
	}
	var b bytes.Buffer
	if err := c.encode(&b); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("png.Decode of the chart: %v", err)
	}
	if got := img.Bounds().Size(); got.X != plotW || got.Y != plotH {
		t.Fatalf("chart size = %v, want %dx%d", got, plotW, plotH)
	}
	count := map[[3]uint32]int{}
	for y := range plotH {
		for x := range plotW {
			r, g, bl, _ := img.At(x, y).RGBA()
			count[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
		}
	}
	for _, s := range c.series {
		if n := count[[3]uint32{uint32(s.color.R), uint32(s.color.G), uint32(s.color.B)}]; n < 50 {
			t.Errorf("series %s has %d pixels of its color, want a line", s.name, n)
		}
	}
}

func TestYTicks(t *testing.T) {
	c := &chart{logY: true}
	if got := c.yTicks(-2, 1); len(got) != 4 || got[0].label != "0.01" || got[3].label != "10" {
		t.Fatalf("log ticks over 1e-2..1e1 = %+v, want 0.01 0.1 1 10", got)
	}
	lin := (&chart{}).yTicks(0, 12000)
	if len(lin) < 3 || lin[1].label != shortNumber(lin[1].v) || lin[len(lin)-1].v > 12000 {
		t.Fatalf("linear ticks over 0..12000 = %+v", lin)
	}
}
