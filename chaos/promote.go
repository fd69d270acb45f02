package chaos

import (
	"context"
	"errors"
	"fmt"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// standby is an asynchronous replica of server a, idle until a fault has it follow a, fall behind and
// take a's place, as a failover tool (or a virtual IP moved) puts a replica in a failed server's place.
type standby interface {
	// follow has it replicate server a from the beginning and waits until it holds all a wrote.
	follow(ctx context.Context) error
	// freeze waits until it holds all a wrote, then stops it receiving: it lags from here on.
	freeze(ctx context.Context) error
	// promote kills server a and makes the standby a server of its own, server a from now on; it
	// returns the standby's address.
	promote(ctx context.Context) (string, error)
}

// replicaPromoted puts server a's replica in a's place, behind a: the replica follows a, stops
// receiving, and a leases past it (through both replicas); replica 2 stops, a is SIGKILLed, the
// replicas' proxies to a are pointed at the promoted replica, and replica 2 starts again — a process
// that never saw a. Both must fence a (replica 1 leased past the copy; replica 2 has only the marks
// the peers keep, which say the copy is another server); the revert repairs it, as an operator would.
func (w *world) replicaPromoted(sb standby) fault {
	name := "server a's replica fallen behind and promoted in its place (a SIGKILLed, its address given to the replica), replica 2 restarted meanwhile"
	promoted := false
	return fault{name: name, expect: ExpectFenced,
		apply: func(ctx context.Context, res *FaultResult) error {
			if err := sb.follow(ctx); err != nil {
				return fmt.Errorf("the replica of server a: %w", err)
			}
			if err := sb.freeze(ctx); err != nil {
				return fmt.Errorf("the replica of server a: %w", err)
			}
			if err := w.issuedPast(ctx, 0); err != nil { // both replicas lease past what the copy holds
				return err
			}
			w.stopReplica(1)
			addr, err := sb.promote(ctx)
			if err != nil {
				return err
			}
			promoted = true
			var errs []error
			for r := range 2 {
				p := w.proxies[r][0]
				errs = append(errs, p.Update(&toxiproxy.Proxy{Listen: p.Listen, Upstream: addr, Enabled: true}))
			}
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("pointing the proxies to server a at the replica: %w", err)
			}
			res.Detail = "replica promoted at " + addr
			return w.startReplica(ctx, 1, w.layout.indexes())
		},
		revert: func(ctx context.Context, res *FaultResult) error {
			if w.replica(1) == nil { // the apply failed before replica 2 came back
				if err := w.startReplica(ctx, 1, w.layout.indexes()); err != nil {
					return err
				}
			}
			if !promoted {
				return nil
			}
			return w.repairFenced(ctx, 0, res)
		}}
}
