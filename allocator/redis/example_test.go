package redis_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/redis"
)

// Two instances issue odd and even IDs; the zero values of the other fields are the defaults.
// (Not run: it needs two Redis instances with appendonly yes and appendfsync always.)
func ExampleOpen() {
	ctx := context.Background()
	s, err := redis.Open(ctx, redis.Config{Addrs: []string{"redis-a:6379", "redis-b:6379"}})
	if err != nil {
		log.Fatal(err) // allocator.ErrMisconfigured says which setting to change
	}
	defer s.Close()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 1000}); err != nil {
		log.Fatal(err)
	}
	b, err := s.Lease(ctx, "orders", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(b) // e.g. orders[1..1999 step 2, 1000 IDs from redis-a:6379]
}
