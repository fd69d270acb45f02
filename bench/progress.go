package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// stagePlan is one stage of a run: its steps (schemes, tables, measurements) and how long each is
// expected to take.
type stagePlan struct {
	name  string
	steps int
	each  time.Duration
}

// progressLine shows where a run is: the stage, the step, and the time left. The time left is what
// remains of the plan, scaled by how long the run has taken so far against the plan of what it did, so
// that a slower machine or server stretches the estimate as soon as it shows. On a terminal it is one line rewritten
// in place; elsewhere (a log, CI) one line a step. Safe for concurrent use.
type progressLine struct {
	out  io.Writer
	live bool
	now  func() time.Time

	mu      sync.Mutex
	stages  []stagePlan
	begun   []int         // steps begun, per stage
	planned time.Duration // every step's plan
	start   time.Time
	// donePlan is the plan of the finished steps.
	donePlan time.Duration
	// The current step: its stage (an index into stages, -1 before the first) and number, its label,
	// when it began and its plan.
	stage, step int
	label       string
	stepStart   time.Time
	stepPlan    time.Duration
	// The last line written, for throttling and for blanking its end when a shorter one replaces it.
	lastWrite time.Time
	lastLen   int
}

func newProgressLine(out io.Writer, live bool, now func() time.Time, stages []stagePlan) *progressLine {
	p := &progressLine{out: out, live: live, now: now, stages: stages, begun: make([]int, len(stages)), stage: -1, start: now()}
	for _, s := range stages {
		p.planned += time.Duration(s.steps) * s.each
	}
	return p
}

// begin starts the next step of stage, named label.
func (p *progressLine) begin(stage, label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stage = -1
	for i, s := range p.stages {
		if s.name == stage {
			p.stage = i
		}
	}
	if p.stage < 0 {
		panic("bench: progress of a stage not planned: " + stage)
	}
	p.begun[p.stage]++
	p.step, p.label, p.stepStart, p.stepPlan = p.begun[p.stage], label, p.now(), p.stages[p.stage].each
	p.writeLocked("", 0, true)
}

// update shows how far the current step is (done in [0, 1]) and what it measured so far.
func (p *progressLine) update(detail string, done float64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.live || p.now().Sub(p.lastWrite) < 200*time.Millisecond {
		return // elsewhere than on a terminal, a line a step is enough
	}
	p.writeLocked(detail, done, false)
}

// end finishes the current step.
func (p *progressLine) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.donePlan += p.stepPlan
	p.stepPlan = 0
}

// skip takes steps of stage that will not run (a case that could not start) out of the plan.
func (p *progressLine) skip(stage string, steps int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.stages {
		if s.name == stage {
			p.planned -= time.Duration(steps) * s.each
		}
	}
}

// finish ends the line and says how long the run took, or that it stopped.
func (p *progressLine) finish(failed bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	took := p.now().Sub(p.start).Round(time.Second)
	msg := "bench: done in " + took.String()
	if failed {
		msg = "bench: stopped after " + took.String()
	}
	if p.live {
		fmt.Fprintf(p.out, "\r%-*s\n", p.lastLen, msg)
		return
	}
	fmt.Fprintln(p.out, msg)
}

// left estimates the time left, the current step being done as far as done says.
func (p *progressLine) left(done float64) time.Duration {
	inStep := time.Duration(done * float64(p.stepPlan))
	remaining := p.planned - p.donePlan - inStep
	if remaining <= 0 {
		return 0
	}
	scale := 1.0
	if base := p.donePlan + inStep; base > time.Second { // too little done says nothing yet
		scale = float64(p.now().Sub(p.start)) / float64(base)
	}
	return time.Duration(scale * float64(remaining))
}

func (p *progressLine) writeLocked(detail string, done float64, newStep bool) {
	p.lastWrite = p.now()
	st := p.stages[p.stage]
	line := fmt.Sprintf("bench: %s %d/%d, %s", st.name, p.step, st.steps, p.label)
	if detail != "" {
		line += " " + detail
	}
	line += fmt.Sprintf(" (stage %d of %d; %s left)", p.stage+1, len(p.stages), roughly(p.left(done)))
	if !p.live {
		if newStep {
			fmt.Fprintln(p.out, line)
		}
		return
	}
	pad := max(p.lastLen-len(line), 0)
	fmt.Fprint(p.out, "\r"+line+strings.Repeat(" ", pad))
	p.lastLen = len(line)
}

// roughly writes an estimate as a person reads it: to the second under a minute, then to 10 seconds.
func roughly(d time.Duration) string {
	switch {
	case d < time.Second:
		return "under a second"
	case d < time.Minute:
		return fmt.Sprintf("about %ds", int(d.Round(time.Second).Seconds()))
	}
	d = d.Round(10 * time.Second)
	m, s := int(d.Minutes()), int(d.Seconds())%60
	if s == 0 {
		return fmt.Sprintf("about %dm", m)
	}
	return fmt.Sprintf("about %dm%02ds", m, s)
}
