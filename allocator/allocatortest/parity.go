package allocatortest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ticketd/ticketd/allocator"
)

// LeaseConcurrently takes total blocks of namespace from b, spread over goroutines goroutines, with
// sizes from 1 to 10, and returns them all; it stops at the first error and returns it.
func LeaseConcurrently(b allocator.Backend, namespace string, goroutines, total int) ([]allocator.Block, error) {
	var (
		mu     sync.Mutex
		blocks = make([]allocator.Block, 0, total)
		left   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Value
	)
	left.Store(int64(total))
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []allocator.Block
			for i := 0; left.Add(-1) >= 0; i++ {
				blk, err := b.Lease(context.Background(), namespace, int64(1+(g+i)%10))
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				local = append(local, blk)
			}
			mu.Lock()
			blocks = append(blocks, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return blocks, err
	}
	if len(blocks) != total {
		return blocks, fmt.Errorf("%d blocks, want %d", len(blocks), total)
	}
	return blocks, nil
}

// CheckParity checks Flickr's promise on blocks leased from servers, listed in the order of their
// offsets: servers[i] (offset i+1 of len(servers)) issues only IDs ≡ i+1 (mod len(servers)), in
// blocks of that step; round-robin reaches every server; and no ID is issued twice. It returns the
// number of blocks from each server.
func CheckParity(blocks []allocator.Block, servers []string) (map[string]int, error) {
	n := int64(len(servers))
	residue := map[string]int64{}
	for i, s := range servers {
		residue[s] = int64(i+1) % n
	}
	perServer := map[string]int{}
	for _, b := range blocks {
		want, ok := residue[b.Server]
		if !ok {
			return perServer, fmt.Errorf("block %v from %q, which is none of %v", b, b.Server, servers)
		}
		if b.Step != n || b.Start%n != want {
			return perServer, fmt.Errorf("block %v from %s breaks parity (want IDs ≡ %d mod %d)", b, b.Server, want, n)
		}
		perServer[b.Server]++
	}
	for _, s := range servers {
		if perServer[s] == 0 {
			return perServer, fmt.Errorf("round-robin never reached %s: %v", s, perServer)
		}
	}
	return perServer, CheckDisjoint(blocks)
}
