package failover

import (
	"fmt"
	"sort"
	"sync"

	"github.com/ticketd/ticketd/allocator"
)

// Fence is whether a server is fenced: the namespaces whose counters went below a water mark (a
// restored backup, lost data), and why. A fenced server still answers, so its peers' marks read from it
// hold. Safe for concurrent use; the zero value is not fenced.
type Fence struct {
	mu         sync.Mutex
	namespaces []string
	why        string
}

// Clear lifts the fence: the server's counters are at or above every mark again.
func (f *Fence) Clear() {
	f.mu.Lock()
	f.namespaces, f.why = nil, ""
	f.mu.Unlock()
}

// Fenced reports whether the server is fenced for any namespace.
func (f *Fence) Fenced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.namespaces) > 0
}

// Report adds the fence to a server's health: Fenced, and as the error of a server out of rotation,
// why.
func (f *Fence) Report(h *allocator.ServerHealth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h.Fenced = len(f.namespaces) > 0
	if h.Fenced && !h.Healthy {
		h.Error = f.why
	}
}

// Fence records that server s went back in time for the namespaces named, logs it (once while the
// reason stays the same), runs kick (the
// backend's guard, which writes this process's marks to the peers at once, so that other processes see
// them at their next read) when it is not nil, and returns the error that takes s out of rotation.
func (set *Set[S, R]) Fence(s S, f *Fence, namespaces, details []string, kick func()) error {
	sort.Strings(namespaces)
	sort.Strings(details)
	err := fmt.Errorf("%w: %s", allocator.ErrFenced, FenceReason(s.Name(), namespaces, details))
	f.mu.Lock()
	same := f.why == err.Error()
	f.namespaces, f.why = namespaces, err.Error()
	f.mu.Unlock()
	if !same { // every check and lease that meets the fence says so again: log it once
		set.cfg.Logger.Error(set.cfg.Noun+" fenced", "server", s.Name(), "namespaces", namespaces, "err", err)
	}
	if kick != nil {
		kick()
	}
	return err
}
