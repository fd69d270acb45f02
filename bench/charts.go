package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

// drawCharts writes the charts of the parts the report has and returns their file names.
func (r *Report) drawCharts(dir string) ([]string, error) {
	var out []string
	save := func(p *plot.Plot, name string, w, h vg.Length) error {
		if err := p.Save(w, h, filepath.Join(dir, name)); err != nil {
			return err
		}
		out = append(out, name)
		return nil
	}
	if r.Gen != nil {
		if p, ok := r.Gen.chart(); ok {
			if err := save(p, "gen-ns-per-id.png", 9*vg.Inch, 6*vg.Inch); err != nil {
				return nil, err
			}
		}
	}
	if r.BTree != nil {
		if p, ok := r.BTree.chart(); ok {
			if err := save(p, "btree-size.png", 9*vg.Inch, 5*vg.Inch); err != nil {
				return nil, err
			}
		}
	}
	if r.Load != nil {
		for _, c := range []struct {
			name, title, unit string
			value             func(LoadRow) float64
		}{
			{"load-throughput.png", "Throughput vs clients (closed loop)", "IDs/s", func(l LoadRow) float64 { return l.IDsPerSecond }},
			{"load-p99.png", "p99 latency vs clients (closed loop)", "p99 (ms)", func(l LoadRow) float64 { return l.P99ms }},
		} {
			if p, ok := r.Load.chart(c.title, c.unit, c.value); ok {
				if err := save(p, c.name, 11*vg.Inch, 6*vg.Inch); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// log10Ticks labels a linear axis that carries log10 of nanoseconds.
type log10Ticks struct{}

func (log10Ticks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for e := math.Floor(min); e <= math.Ceil(max); e++ {
		t = append(t, plot.Tick{Value: e, Label: nanos(math.Pow(10, e))})
	}
	return t
}

func nanos(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%gs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%gµs", ns/1e3)
	}
	return fmt.Sprintf("%gns", ns)
}

func (g *GenReport) chart() (*plot.Plot, bool) {
	var names []string
	var one, all plotter.Values
	for _, r := range g.Rows {
		if r.Error != "" || r.NsPerID <= 0 {
			continue
		}
		names = append(names, r.Scheme)
		one = append(one, math.Log10(max(r.NsPerID, 1)))
		all = append(all, math.Log10(max(r.NsPerIDAllCores, 1)))
	}
	if len(names) == 0 {
		return nil, false
	}
	p := plot.New()
	p.Title.Text = "Time per ID (log scale; shorter is faster)"
	p.X.Label.Text = "ns per ID"
	p.X.Tick.Marker = log10Ticks{}
	p.X.Min = 0
	for _, v := range append(append(plotter.Values{}, one...), all...) {
		p.X.Max = max(p.X.Max, math.Ceil(v))
	}
	w := vg.Points(7)
	for i, vs := range []plotter.Values{one, all} {
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return nil, false
		}
		b.Horizontal = true
		b.Color = palette[i]
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-0.5) * w
		p.Add(b)
		p.Legend.Add([]string{"one goroutine", "all cores"}[i], b)
	}
	p.NominalY(names...)
	p.Add(plotter.NewGrid())
	return p, true
}

func (b *BTreeReport) chart() (*plot.Plot, bool) {
	var names []string
	var data, index plotter.Values
	for _, r := range b.Rows {
		if r.Error != "" {
			continue
		}
		names = append(names, r.Key)
		data = append(data, float64(r.DataBytes)/(1<<20))
		index = append(index, float64(r.IndexBytes)/(1<<20))
	}
	if len(names) == 0 {
		return nil, false
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("InnoDB size after %s rows, per key type", count(b.RowsPerTable))
	p.X.Label.Text = "MiB (information_schema.TABLES after ANALYZE TABLE)"
	w := vg.Points(9)
	for i, vs := range []plotter.Values{data, index} {
		bc, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return nil, false
		}
		bc.Horizontal = true
		bc.Color = palette[i]
		bc.LineStyle.Width = 0
		bc.Offset = vg.Length(float64(i)-0.5) * w
		p.Add(bc)
		p.Legend.Add([]string{"data (clustered primary key)", "secondary index"}[i], bc)
	}
	for _, v := range data {
		p.X.Max = max(p.X.Max, 1.4*v) // room for the legend at the bottom right
	}
	p.NominalY(names...)
	p.Add(plotter.NewGrid())
	return p, true
}

func (l *LoadReport) chart(title, unit string, value func(LoadRow) float64) (*plot.Plot, bool) {
	series := map[string]plotter.XYs{}
	var ticks []plot.Tick
	maxClients := 1
	for _, r := range l.Rows {
		if r.Mode != "closed" || r.Error != "" || value(r) <= 0 {
			continue
		}
		series[r.Case] = append(series[r.Case], plotter.XY{X: float64(r.Clients), Y: value(r)})
		if r.Clients > maxClients || len(ticks) == 0 {
			ticks = append(ticks, plot.Tick{Value: float64(r.Clients), Label: fmt.Sprint(r.Clients)})
			maxClients = max(maxClients, r.Clients)
		}
	}
	if len(series) == 0 {
		return nil, false
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "clients (log scale)"
	p.Y.Label.Text = unit + " (log scale)"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks(ticks)
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	// The measured range takes the left part; the legend sits in the empty right part.
	p.X.Min, p.X.Max = 1, math.Pow(float64(maxClients), 2.2)
	if maxClients < 4 {
		p.X.Max = 64
	}
	for i, name := range sortedKeys(series) {
		line, points, err := plotter.NewLinePoints(series[name])
		if err != nil {
			return nil, false
		}
		c := palette[i%len(palette)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		if i >= len(palette) {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	return p, true
}
