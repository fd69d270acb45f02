//go:build !race

package sim

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestZZFingerprint(t *testing.T) {
	out := os.Getenv("SIM_FP_OUT")
	if out == "" {
		t.Skip("no SIM_FP_OUT")
	}
	var b strings.Builder
	fp := func(label string, seed uint64, off Off) {
		r := Run(seed, off)
		h := sha256.New()
		for _, l := range r.Trace() {
			h.Write([]byte(l))
			h.Write([]byte{'\n'})
		}
		v := r.Violation
		if strings.HasPrefix(v, "panic:") {
			v = strings.SplitN(v, "\n", 2)[0]
		}
		fmt.Fprintf(&b, "%s %d lines=%d viol=%q counts=", label, seed, len(r.Trace()), v)
		for _, k := range Kinds(r.Counts) {
			fmt.Fprintf(&b, "%s:%d,", k, r.Counts[k])
		}
		fmt.Fprintf(&b, " trace=%x\n", h.Sum(nil))
	}
	for s := uint64(1); s <= 300; s++ {
		fp("on", s, Off{})
	}
	for _, off := range []Off{{Floors: true}, {PeerMarks: true}, {Identity: true}, {CeilingBound: true}, {RepairMargin: true}} {
		for s := uint64(1); s <= 40; s++ {
			fp(off.Names()[0], s, off)
		}
	}
	// known seeds that found bugs, and seeds known to violate below 200,000 (if any are listed)
	for _, s := range []uint64{10161, 125047, 100580} {
		fp("bug", s, Off{})
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
