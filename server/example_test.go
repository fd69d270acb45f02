package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/ticketd/ticketd/allocator/embedded"
	"github.com/ticketd/ticketd/server"
)

// A server on the embedded store; the admin's first lease creates the namespace.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "ticketd-example")
	defer os.RemoveAll(dir)
	store, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	srv, err := server.New(server.Config{
		Backend:       store,
		Auth:          server.Auth{Admin: "s3cret-admin-token-2026"},
		CreateOnLease: true,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	req := httptest.NewRequestWithContext(context.Background(), "POST", "/v1/namespaces/demo/blocks", strings.NewReader(`{"size":10}`))
	req.Header.Set("Authorization", "Bearer s3cret-admin-token-2026")
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, req)
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// 200 {"namespace":"demo","start":"1","step":1,"size":10,"last":"10","expires_at":null,"server":"embedded"}
}
