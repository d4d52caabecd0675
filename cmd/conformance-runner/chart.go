package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// storeStyles tell the stores apart in print as on screen: each has its
// own colour and shape.
var storeStyles = []struct {
	color color.Color
	shape draw.GlyphDrawer
}{
	{color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.CircleGlyph{}},
	{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.SquareGlyph{}},
	{color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, draw.TriangleGlyph{}},
	{color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, draw.PyramidGlyph{}},
	{color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, draw.RingGlyph{}},
}

// drawChart places every store's operations per second side by side, one
// column per workload and level, on a logarithmic axis: the stores differ
// by orders of magnitude.
func drawChart(path string, r benchReport) error {
	rows := r.rows()
	p := plot.New()
	p.Title.Text = fmt.Sprintf("runstate bench %s: %s beside the reference stores", r.Suite, r.Adapter)
	p.Y.Label.Text = "operations per second (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = labelTicks(rows)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YTop
	p.X.Min, p.X.Max = -0.5, float64(len(rows))-0.5
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	top := 0.0
	for i, s := range r.Stores {
		var pts plotter.XYs
		// Stores sit a little apart within a column, so equal figures
		// do not hide each other.
		shift := (float64(i) - float64(len(r.Stores)-1)/2) * 0.12
		for x, label := range rows {
			if m, ok := s.find(label); ok && m.Skipped == "" && m.PerSecond > 0 {
				pts = append(pts, plotter.XY{X: float64(x) + shift, Y: m.PerSecond})
				top = math.Max(top, m.PerSecond)
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		style := storeStyles[i%len(storeStyles)]
		sc.GlyphStyle = draw.GlyphStyle{Color: style.color, Shape: style.shape, Radius: vg.Points(4)}
		p.Add(sc)
		name := s.Name
		if s.Reference {
			name += " (reference)"
		}
		p.Legend.Add(name, sc)
	}
	if top > 0 {
		p.Y.Max = top * 20 // room above the points for the legend
	}
	width := vg.Length(math.Max(6, 0.9*float64(len(rows)))) * vg.Inch
	return p.Save(width, 5.5*vg.Inch, path)
}

// labelTicks names each column after its workload and level.
type labelTicks []string

func (l labelTicks) Ticks(min, max float64) []plot.Tick {
	ticks := make([]plot.Tick, len(l))
	for i, label := range l {
		ticks[i] = plot.Tick{Value: float64(i), Label: label}
	}
	return ticks
}
