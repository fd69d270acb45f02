package redis

import (
	"context"
	"fmt"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

func TestMain(m *testing.M) {
	RouteClientLogs(quiet) // dial failures of killed instances are expected here
	m.Run()
}

// BenchmarkLease measures block leases of 1,000 IDs at 1, 16 and 64 concurrent callers, on the
// harness's Redis alone and on two private instances (odd and even). A lease is one script call.
//
//	scripts/with-servers.sh go test -run '^$' -bench BenchmarkLease -benchtime 3s ./allocator/redis/
func BenchmarkLease(b *testing.B) {
	pair := privatePair(b)
	setups := []struct {
		name  string
		addrs []string
	}{
		{"instances=1", []string{testenv.RedisAddr(b)}},
		{"instances=2", []string{pair[0].Addr(), pair[1].Addr()}},
	}
	ctx := context.Background()
	for _, setup := range setups {
		s := openStore(b, testConfig(setup.addrs...))
		if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", setup.name, g), func(b *testing.B) {
				b.ReportAllocs()
				allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "leases/s",
					Call: func() error {
						_, err := s.Lease(ctx, "bench", 1000)
						return err
					}})
			})
		}
	}
}
