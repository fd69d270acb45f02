package failover

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/backoff"
)

// Member is one server's health as its backend sees it: whether leases may go to it, why not, and when
// to try it again. A backend's server type embeds *Member. Safe for concurrent use.
type Member struct {
	name string
	cfg  *Config

	reviving sync.Mutex // one revival at a time

	mu        sync.Mutex
	up        bool // checked and answering: leases may go here
	streak    backoff.Streak
	lastErr   error
	downSince time.Time
}

// NewMember returns the health of a server that has not been checked yet: down since now, until a
// check puts it in rotation. cfg gives its backoff, clock and logger; Noun, MinBackoff, MaxBackoff,
// Logger and Now must be set.
func NewMember(name string, cfg *Config) *Member {
	return &Member{name: name, cfg: cfg, downSince: cfg.Now()}
}

// Name is the server's name in blocks, logs and metrics.
func (m *Member) Name() string { return m.name }

// Usable reports whether the server passed its checks and has not failed since.
func (m *Member) Usable() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.up
}

// Due reports whether a down server's backoff has passed.
func (m *Member) Due(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.up && m.streak.Due(now)
}

// Health is the server's name, whether it is usable and, when not, why. A backend adds what it knows
// of the server's step and offset.
func (m *Member) Health() allocator.ServerHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := allocator.ServerHealth{Name: m.name, Healthy: m.up}
	if !m.up {
		h.Error = "not checked yet"
		if m.lastErr != nil {
			h.Error = m.lastErr.Error()
		}
	}
	return h
}

// MarkDown takes the server out of rotation with exponential backoff and jitter.
func (m *Member) MarkDown(err error) {
	cfg := m.cfg
	m.mu.Lock()
	wasUp := m.up
	m.up = false
	wait := backoff.Policy{Min: cfg.MinBackoff, Max: cfg.MaxBackoff, Jitter: cfg.Runtime.Float64}.Wait(m.streak.Failures + 1)
	now := cfg.Now()
	m.streak.Fail(now, wait)
	m.lastErr = err
	if wasUp {
		m.downSince = now
	}
	m.mu.Unlock()
	if wasUp {
		cfg.Logger.Warn(cfg.Noun+" down; leasing from the others", "server", m.name, "retry_in", wait.Round(time.Millisecond), "err", err)
	}
}

// MarkUp notes a successful lease: a usable server's backoff starts afresh. It never brings a down
// server back; only a revival, which checks the server again, does.
func (m *Member) MarkUp() {
	m.mu.Lock()
	if m.up {
		m.streak.Failures = 0
	}
	m.mu.Unlock()
}

// MarkUsable puts a server that passed its checks in rotation; one that was out wakes the leases that
// wait for a next round (see Set.pause).
func (m *Member) MarkUsable() {
	m.mu.Lock()
	back := !m.up
	m.up, m.streak.Failures, m.lastErr = true, 0, nil
	m.mu.Unlock()
	if back && m.cfg.rotation != nil {
		m.cfg.rotation.back()
	}
}

// rotation tells the leases that wait between rounds over the servers that a server came back.
type rotation struct {
	mu      sync.Mutex
	waiting []*func()
}

// onBack calls wake once when a server comes back, unless the returned stop is called first.
func (r *rotation) onBack(wake func()) (stop func()) {
	w := &wake
	r.mu.Lock()
	r.waiting = append(r.waiting, w)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.waiting = slices.DeleteFunc(r.waiting, func(x *func()) bool { return x == w })
		r.mu.Unlock()
	}
}

// back wakes every lease waiting.
func (r *rotation) back() {
	r.mu.Lock()
	waiting := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	for _, w := range waiting {
		(*w)()
	}
}

// NoteError records why a check failed, for Health, without changing whether the server is usable.
func (m *Member) NoteError(err error) {
	m.mu.Lock()
	m.lastErr = err
	m.mu.Unlock()
}

// ReviveWith runs check on a server that is down and puts the server back in rotation when it passes,
// or marks it down again with a longer backoff. Revivals of one server run one at a time; one that
// finds the server usable already does nothing.
func (m *Member) ReviveWith(ctx context.Context, check func(context.Context) error) error {
	m.reviving.Lock()
	defer m.reviving.Unlock()
	if m.Usable() {
		return nil
	}
	if err := check(ctx); err != nil {
		m.MarkDown(err)
		return err
	}
	m.mu.Lock()
	since := m.downSince
	m.mu.Unlock()
	m.MarkUsable()
	m.cfg.Logger.Info(m.cfg.Noun+" back in rotation", "server", m.name, "down_for", m.cfg.Now().Sub(since).Round(time.Millisecond))
	return nil
}
