package client

import (
	_ "unsafe" // for go:linkname
)

// The fast path picks the shard of the processor (P) it runs on, so that each processor increments a
// counter on its own cache line; a counter shared by all of them bounces between cores and caps the
// aggregate rate near that of one core. The runtime exposes the processor's index only through
// procPin, which it keeps for outside packages ("Do not remove or change the type signature",
// go.dev/issue/67401). sync.Pool reaches the same per-processor slot, but costs about three times as
// much per call.

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// procID returns the index of the processor the caller runs on. The goroutine may move right after;
// the index is only a hint for which shard to use, never needed for correctness.
func procID() int {
	p := procPin()
	procUnpin()
	return p
}
