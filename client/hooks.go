package client

import "time"

// Hooks are functions a Client calls as things happen to it, so that a service can export its
// refills, stalls, hedges and discarded IDs where it already exports its metrics (Prometheus,
// OpenTelemetry, expvar) without the SDK depending on any of them. Every field is optional. They are
// called synchronously, some with the Client's lock held: a hook must return quickly (add to a counter,
// observe a histogram) and must not call the Client. Stats holds the same counts, for polling.
type Hooks struct {
	// Refill is called once per lease answered: ids is the block's size (0 on error), took how long the
	// lease took, err why it failed (nil when it succeeded). A hedged refill whose second block is kept
	// calls it for each.
	Refill func(ids int64, took time.Duration, err error)
	// Stall is called when a call of Next or NextN finds the cache empty and waits for a refill (the
	// prefetch came too late). Waiting for the very first block is not a stall.
	Stall func()
	// Hedge is called when a refill was not answered within the hedge delay and a second lease was sent
	// to another URL (won false), and again when that second lease's block came first (won true).
	Hedge func(won bool)
	// Discard is called with IDs dropped unserved, and why: DiscardExpired (their block's lease TTL
	// ran out) or DiscardSpare (the spare block of a hedged refill, not needed).
	Discard func(ids int64, reason string)
}

// The reasons Hooks.Discard gives.
const (
	DiscardExpired = "expired"
	DiscardSpare   = "spare"
)

// WithHooks sets functions the Client calls on refills, stalls, hedges and discarded IDs (see Hooks).
func WithHooks(h Hooks) Option { return func(c *config) { c.hooks = h } }

func (h *Hooks) refill(ids int64, took time.Duration, err error) {
	if h.Refill != nil {
		h.Refill(ids, took, err)
	}
}

func (h *Hooks) stall() {
	if h.Stall != nil {
		h.Stall()
	}
}

func (h *Hooks) hedge(won bool) {
	if h.Hedge != nil {
		h.Hedge(won)
	}
}

func (h *Hooks) discard(ids int64, reason string) {
	if h.Discard != nil && ids > 0 {
		h.Discard(ids, reason)
	}
}
