package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/ticketd/ticketd/client"
)

// The SDK against ticketd servers: one Client per namespace, shared by every goroutine of the service.
// (The server here is a stand-in that answers the one lease the example needs as ticketd would.)
func Example() {
	ticketd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"namespace":"orders","start":"1001","step":2,"size":1000,"last":"2999","expires_at":null,"server":"odd"}`)
	}))
	defer ticketd.Close()

	ids, err := client.New(client.HTTP(ticketd.URL), "orders", client.WithToken("the-namespace-token"))
	if err != nil {
		panic(err)
	}
	defer ids.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	batch := make([]int64, 3)
	n, err := ids.NextN(ctx, batch)
	fmt.Println(n, batch, err)
	// Output: 3 [1001 1003 1005] <nil>
}

// counter is a Backend in memory: what a service's unit tests can run a Client on, with no server.
type counter struct {
	mu   sync.Mutex
	next int64
}

func (c *counter) Lease(_ context.Context, namespace string, size int64) (client.Block, error) {
	if size == 0 {
		size = 100
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	blk := client.Block{Namespace: namespace, Server: "memory", Start: c.next, Step: 1, Size: size}
	c.next += size
	return blk, nil
}

func (c *counter) Settings(context.Context, string) (client.Settings, error) {
	return client.Settings{BlockSize: 100, MaxBlockSize: 10_000}, nil
}

// A Client on a Backend of the caller's own, such as a test double. For ticketd's backends in the same
// process (the MySQL pair, the embedded store), use the ticketd module's inprocess.Source.
func ExampleFromBackend() {
	ids, err := client.New(client.FromBackend(&counter{next: 1}), "test")
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	id, err := ids.Next(context.Background())
	fmt.Println(id, err)
	// Output: 1 <nil>
}

// A server's error answer comes back as a StatusError that matches the SDK's sentinel errors.
func ExampleStatusError() {
	ticketd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":{"code":"namespace_not_found","message":"namespace \"nosuch\" not found"}}`)
	}))
	defer ticketd.Close()

	ids, err := client.New(client.HTTP(ticketd.URL), "nosuch")
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	_, err = ids.Next(context.Background())
	var se *client.StatusError
	fmt.Println(errors.Is(err, client.ErrNotFound), errors.As(err, &se) && se.Status == 404, se.Code)
	// Output: true true namespace_not_found
}

// When the cache is empty and no server answers, Next gives up by the context's deadline.
func ExampleClient_Next_unavailable() {
	ids, err := client.New(client.HTTP("http://127.0.0.1:1"), "orders", client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer ids.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = ids.Next(ctx)
	fmt.Println(errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}
