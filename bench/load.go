package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// opTimeout bounds one request of a load case, so that a stuck server cannot hold up the run.
const opTimeout = 10 * time.Second

// maxOpenRate bounds the open-loop rate: above it the sender, not the server, would set the pace.
const maxOpenRate = 100_000

// minOpenRequests is the fewest requests an open-loop measurement sends.
const minOpenRequests = 20

// maxInFlight bounds the open-loop mode's concurrent requests.
const maxInFlight = 256

// loadCase is one way of getting IDs from ticket servers. open returns the operation (one request; it
// returns how many IDs the request yielded) and a cleanup.
type loadCase struct {
	name string
	open func(ctx context.Context) (op func(ctx context.Context) (int64, error), done func(), err error)
	// note, if set, is read after done and added to the report's notes.
	note func() string
}

// LoadRow is one case at one concurrency (closed loop) or one rate (open loop).
type LoadRow struct {
	Case string `json:"case"`
	// Mode is "closed" (Clients callers, each waiting for its answer) or "open" (requests sent at
	// TargetRate whether or not earlier ones returned; latency counted from the intended send time).
	Mode       string  `json:"mode"`
	Clients    int     `json:"clients,omitempty"`
	TargetRate float64 `json:"target_rate,omitempty"`
	Seconds    float64 `json:"seconds"`
	// Ops are requests that succeeded; IDs the IDs they yielded.
	Ops          int64            `json:"ops"`
	IDs          int64            `json:"ids"`
	OpsPerSecond float64          `json:"ops_per_second"`
	IDsPerSecond float64          `json:"ids_per_second"`
	Errors       int64            `json:"errors"`
	ErrorKinds   map[string]int64 `json:"error_kinds,omitempty"`
	// Latency percentiles of successful requests, in milliseconds, from HdrHistogram.
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P99ms  float64 `json:"p99_ms"`
	P999ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	// SendLagP99ms (open loop) is how late the sender itself was at p99: that much of the latency is the
	// load generator's, not the server's.
	SendLagP99ms float64 `json:"send_lag_p99_ms,omitempty"`
	Error        string  `json:"error,omitempty"`
}

// LoadReport is the load comparison.
type LoadReport struct {
	Rows []LoadRow `json:"rows"`
	// Skipped names the cases this run could not measure, and why.
	Skipped []string `json:"skipped,omitempty"`
	// Notes are figures a case measured besides its rows (e.g. blocks fetched per 1,000 links).
	Notes []string `json:"notes,omitempty"`
}

// recorder collects one worker's results.
type recorder struct {
	hist   *hdrhistogram.Histogram
	ops    int64
	ids    int64
	errors map[string]int64
}

func newRecorder() *recorder {
	return &recorder{hist: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3), errors: map[string]int64{}}
}

func (r *recorder) record(took time.Duration, ids int64, err error) {
	if err != nil {
		r.errors[errorKind(err)]++
		return
	}
	r.ops++
	r.ids += ids
	_ = r.hist.RecordValue(max(took.Microseconds(), 1))
}

// progress counts operations for the live progress line.
type progress struct {
	ops, errs atomic.Int64
}

// showProgress updates the progress line every 500ms, for a measurement of d, until stop is closed.
func showProgress(opts Options, d time.Duration, p *progress, stop <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			el := time.Since(start)
			opts.line.update(fmt.Sprintf("%.1fs: %s ops, %s, errors %d", el.Seconds(), count(p.ops.Load()),
				rate(float64(p.ops.Load())/el.Seconds()), p.errs.Load()), min(float64(el)/float64(d+loadStepOverhead), 1))
		}
	}
}

func summarise(row *LoadRow, recs []*recorder, took time.Duration) {
	all := newRecorder()
	for _, r := range recs {
		all.hist.Merge(r.hist)
		all.ops += r.ops
		all.ids += r.ids
		for k, v := range r.errors {
			all.errors[k] += v
			row.Errors += v
		}
	}
	row.Seconds = took.Seconds()
	row.Ops, row.IDs = all.ops, all.ids
	row.OpsPerSecond = float64(all.ops) / took.Seconds()
	row.IDsPerSecond = float64(all.ids) / took.Seconds()
	if len(all.errors) > 0 {
		row.ErrorKinds = all.errors
	}
	ms := func(q float64) float64 { return float64(all.hist.ValueAtQuantile(q)) / 1000 }
	row.P50ms, row.P90ms, row.P99ms, row.P999ms = ms(50), ms(90), ms(99), ms(99.9)
	row.MaxMs = float64(all.hist.Max()) / 1000
}

// closedLoop runs op from clients goroutines, each sending its next request when the last returns,
// for d or until maxOps requests have been sent.
func closedLoop(ctx context.Context, opts Options, name string, op func(context.Context) (int64, error), clients int, d time.Duration, maxOps int64) LoadRow {
	row := LoadRow{Case: name, Mode: "closed", Clients: clients}
	var sent atomic.Int64
	var p progress
	stop := make(chan struct{})
	opts.line.begin("load", fmt.Sprintf("%s, %d clients", name, clients))
	defer opts.line.end()
	go showProgress(opts, d, &p, stop)
	defer close(stop)
	recs := make([]*recorder, clients)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		recs[i] = newRecorder()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && sent.Add(1) <= maxOps {
				octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
				t0 := time.Now()
				ids, err := op(octx)
				ocancel()
				recs[i].record(time.Since(t0), ids, err)
				p.ops.Add(1)
				if err != nil {
					p.errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	summarise(&row, recs, time.Since(start))
	return row
}

// openLoop sends requests at a fixed rate for d (at most maxInFlight at once). A request's latency
// runs from when it should have been sent, so a server that falls behind shows its queueing delay
// instead of slowing the sender down (coordinated omission).
func openLoop(ctx context.Context, opts Options, name string, op func(context.Context) (int64, error), perSecond float64, d time.Duration, maxOps int64) LoadRow {
	row := LoadRow{Case: name, Mode: "open", TargetRate: perSecond}
	// A slow case still gets a few requests: up to minOpenRequests, as many as fit in 2s at its rate.
	n := int64(perSecond * d.Seconds())
	n = max(n, min(minOpenRequests, int64(math.Ceil(perSecond*max(d, 2*time.Second).Seconds()))), 1)
	n = min(n, maxOps)
	var p progress
	stop := make(chan struct{})
	opts.line.begin("load", fmt.Sprintf("%s, open loop at %s", name, rate(perSecond)))
	defer opts.line.end()
	go showProgress(opts, d, &p, stop)
	defer close(stop)
	jobs := make(chan time.Time, maxInFlight)
	recs := make([]*recorder, maxInFlight)
	var wg sync.WaitGroup
	for i := range recs {
		recs[i] = newRecorder()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for due := range jobs {
				octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
				ids, err := op(octx)
				ocancel()
				recs[i].record(time.Since(due), ids, err)
				p.ops.Add(1)
				if err != nil {
					p.errs.Add(1)
				}
			}
		}()
	}
	lag := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	start := time.Now()
	interval := time.Duration(float64(time.Second) / perSecond)
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		// Short waits are skipped (sent up to 50µs early) rather than slept: a sleep that short
		// oversleeps and would count the sender's lateness as the server's.
		if wait := time.Until(due); wait > 50*time.Microsecond {
			time.Sleep(wait) // at most one interval: the loop stops soon after ctx ends
		}
		if ctx.Err() != nil {
			break
		}
		_ = lag.RecordValue(max(time.Since(due).Microseconds(), 1))
		jobs <- due
	}
	close(jobs)
	wg.Wait()
	summarise(&row, recs, time.Since(start))
	row.SendLagP99ms = float64(lag.ValueAtQuantile(99)) / 1000
	return row
}

// runLoad measures the cases into rep.
func runLoad(ctx context.Context, opts Options, env *mysqlEnv, cases []loadCase, rep *LoadReport) error {
	maxOps := int64(10_000_000)
	for _, c := range cases {
		op, done, err := c.open(ctx)
		if err != nil {
			rep.Rows = append(rep.Rows, LoadRow{Case: c.name, Mode: "closed", Error: err.Error()})
			opts.line.skip("load", len(opts.Clients)+1)
			continue
		}
		best := 0.0
		for _, clients := range opts.Clients {
			if err := ctx.Err(); err != nil {
				done()
				return err
			}
			env.settle(ctx)
			row := closedLoop(ctx, opts, c.name, op, clients, opts.Duration, maxOps)
			best = max(best, row.OpsPerSecond)
			rep.Rows = append(rep.Rows, row)
		}
		// The open loop runs at half the best closed-loop rate: a load the servers can carry, where
		// latency is not queueing behind the sender.
		if best > 0 {
			env.settle(ctx)
			rep.Rows = append(rep.Rows, openLoop(ctx, opts, c.name, op, min(best/2, maxOpenRate), opts.Duration, maxOps))
		} else {
			opts.line.skip("load", 1)
		}
		done()
		if c.note != nil {
			if n := c.note(); n != "" {
				rep.Notes = append(rep.Notes, n)
			}
		}
	}
	return nil
}
