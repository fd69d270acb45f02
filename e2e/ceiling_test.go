package e2e

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/server"
)

// TestExhaustedAtTheCeiling: 16 goroutines take IDs through two ticketd servers on one store until the
// namespace's max_id; each then gets client.ErrExhausted at once (not a retry until its deadline), no
// ID is above max_id and none came twice.
func TestExhaustedAtTheCeiling(t *testing.T) {
	const maxID = 50_000
	store := testenv.Embedded(t, allocator.Namespace{Name: "small", BlockSize: 100, MaxID: maxID})
	var urls []string
	for range 2 {
		srv, err := server.New(server.Config{Backend: store, Auth: server.Auth{Disabled: true},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv.Handler())
		t.Cleanup(func() { ts.Close(); _ = srv.Close() })
		urls = append(urls, ts.URL)
	}
	c := newClient(t, client.HTTP(urls...), "small")
	set := newIDSet()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	highest := make([]int64, 16)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			add := set.adder()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for {
				id, err := c.Next(ctx)
				if err != nil {
					errs[g] = err
					return
				}
				highest[g] = max(highest[g], id)
				add.add(id)
			}
		}()
	}
	wg.Wait()
	for g, err := range errs {
		if !errors.Is(err, client.ErrExhausted) {
			t.Fatalf("goroutine %d ended with %v, want ErrExhausted", g, err)
		}
		if highest[g] > maxID {
			t.Fatalf("goroutine %d got ID %d, above max_id %d", g, highest[g], maxID)
		}
	}
	set.check(t, set.n.Load())
	if set.n.Load() == 0 {
		t.Fatal("no ID served before ErrExhausted")
	}
	// Every ID below the ceiling was served before ErrExhausted, except those the client dropped and
	// counted (a hedge's spare block with no room for it): the ticketd that met the ceiling first sent
	// the client on to the other, whose segments still held the last IDs.
	st := c.Stats()
	t.Logf("%d of the %d IDs below max_id served, %d discarded, then ErrExhausted", set.n.Load(), maxID, st.Discarded)
	if set.n.Load()+st.Discarded != maxID {
		t.Fatalf("%d IDs served and %d discarded, want the %d below max_id", set.n.Load(), st.Discarded, maxID)
	}
}
