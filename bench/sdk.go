package bench

import (
	"context"

	"github.com/ticketd/ticketd/allocator"
)

// ticketRowName names the ticket row of the generation table.
const ticketRowName = "ticketd blocks, leased directly (no SDK)"

// newTicketSource returns the source the ticket rows use: IDs from cached blocks of size IDs of ns.
func newTicketSource(_ context.Context, b allocator.Backend, ns string, size int64) (idSource, func(), error) {
	return &blockSource{b: b, ns: ns, size: size}, func() {}, nil
}

// sdkLoadCases are the load cases that go through the SDK.
func sdkLoadCases(*mysqlEnv) ([]loadCase, []string) {
	return nil, []string{"the SDK over HTTP: the SDK is not in this build"}
}
