package failover

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// MarkWrites is whether this process's water marks reach one server: per server whose marks are
// written there, the failure of the last write, until a write succeeds. A process whose marks do not
// reach the peers (a user without the INSERT grant, a full disk) still serves, but the guard loses
// what it knows across restarts, so it is shown: in the server's health, its metric and doctor. Safe
// for concurrent use; the zero value knows of no failure.
type MarkWrites struct {
	mu      sync.Mutex
	failing map[string]markFailure // by the server whose marks failed to reach this one
}

type markFailure struct {
	since time.Time
	err   error
}

// Note records the outcome of writing the marks of the server named about.
func (w *MarkWrites) Note(about string, err error, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		delete(w.failing, about)
		return
	}
	if w.failing == nil {
		w.failing = map[string]markFailure{}
	}
	f, ok := w.failing[about]
	if !ok {
		f.since = now
	}
	f.err = err
	w.failing[about] = f
}

// Problem says why marks do not reach the server, or "" when every write since the last failure
// succeeded.
func (w *MarkWrites) Problem() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failing) == 0 {
		return ""
	}
	names := make([]string, 0, len(w.failing))
	for about := range w.failing {
		names = append(names, about)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, about := range names {
		f := w.failing[about]
		parts = append(parts, fmt.Sprintf("the water marks of %s have not been written here since %s: %v", about, f.since.UTC().Format(time.RFC3339), f.err))
	}
	return strings.Join(parts, "; ") + " (the restored-state guard keeps what this process saw only while it runs: grant INSERT and UPDATE on the mark tables, or free the disk)"
}
