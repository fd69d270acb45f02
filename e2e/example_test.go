package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/embedded"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/inprocess"
	"github.com/ticketd/ticketd/server"
)

// tempStore opens an embedded store in a new directory, with the namespace when one is given, and
// returns it with the function that removes it.
func tempStore(ns allocator.Namespace) (*embedded.Store, func()) {
	dir, err := os.MkdirTemp("", "client-example")
	if err != nil {
		panic(err)
	}
	store, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	if ns.Name != "" {
		if _, err := store.CreateNamespace(context.Background(), ns); err != nil {
			panic(err)
		}
	}
	return store, func() { store.Close(); os.RemoveAll(dir) }
}

// An in-process client on the embedded store: no server, no network. With the MySQL pair, pass the
// *mysql.Store that mysql.Open returns instead.
func Example_inprocess() {
	store, remove := tempStore(allocator.Namespace{Name: "orders", Start: 1000})
	defer remove()
	ctx := context.Background()

	ids, err := client.New(inprocess.Source(store), "orders")
	if err != nil {
		panic(err)
	}
	defer ids.Close()

	batch := make([]int64, 5)
	n, err := ids.NextN(ctx, batch)
	fmt.Println(n, batch, err)

	id, err := ids.Next(ctx)
	fmt.Println(id > 1004, err)
	// Output:
	// 5 [1000 1001 1002 1003 1004] <nil>
	// true <nil>
}

// A client of two ticketd servers with a namespace token. Here the servers run in-process on one
// embedded store; in production they are `ticketd serve` replicas on the MySQL pair.
func Example_twoServers() {
	store, remove := tempStore(allocator.Namespace{Name: "links", Start: 7000})
	defer remove()
	const token = "links-token-0123456789"
	var urls []string
	for range 2 {
		srv, err := server.New(server.Config{Backend: store,
			Auth:   server.Auth{Tokens: []server.NamespaceToken{{Namespace: "links", Token: token}}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			panic(err)
		}
		defer srv.Close()
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		urls = append(urls, ts.URL)
	}

	ids, err := client.New(client.HTTP(urls...), "links", client.WithToken(token))
	if err != nil {
		panic(err)
	}
	defer ids.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	batch := make([]int64, 3)
	n, err := ids.NextN(ctx, batch)
	fmt.Println(n, batch, err)
	st := ids.Stats()
	fmt.Println(st.Served, st.Refills, len(st.Endpoints))
	// Output:
	// 3 [7000 7001 7002] <nil>
	// 3 1 2
}

// Errors from the server come back as the SDK's sentinel errors.
func Example_notFound() {
	store, remove := tempStore(allocator.Namespace{})
	defer remove()
	srv, err := server.New(server.Config{Backend: store, Auth: server.Auth{Disabled: true},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	ids, err := client.New(client.HTTP(ts.URL), "nosuch")
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	_, err = ids.Next(context.Background())
	var se *client.StatusError
	fmt.Println(errors.Is(err, client.ErrNotFound), errors.As(err, &se) && se.Status == 404, se.Code)
	// Output: true true namespace_not_found
}
