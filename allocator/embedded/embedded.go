// Package embedded is ticketd's single-node backend: every namespace's counter lives in one local bbolt
// file, synced to disk before a lease returns. It needs no database server, so ticketd runs anywhere.
package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ticketd/ticketd/allocator"
)

// ServerName is the ticket server name in blocks from the embedded store.
const ServerName = "embedded"

// FileName is the store's file inside the data directory.
const FileName = "ticketd.db"

var bucket = []byte("namespaces")

// Config configures a Store. The zero value of each field means its default; a negative
// number is refused with allocator.ErrInvalidConfig naming the field.
type Config struct {
	// Dir is the data directory; created if missing. Default "./ticketd-data".
	Dir string
	// LockTimeout is how long Open waits for another process to release the file. Default 1s.
	LockTimeout time.Duration

	now     func() time.Time
	syncDir func(dir string) error
}

// Store is the embedded backend: stride 1, one file, fsync before a lease returns. Safe for concurrent
// use; one process at a time may open a data directory.
type Store struct {
	db        *bolt.DB
	path      string
	now       func() time.Time
	closeOnce sync.Once
	closeErr  error

	commits commits // leases that arrive while one commits share the next commit
}

var _ allocator.Backend = (*Store)(nil)
var _ allocator.HealthReporter = (*Store)(nil)

// record is a namespace as stored.
type record struct {
	Next         int64 `json:"next"`
	Start        int64 `json:"start"`
	BlockSize    int64 `json:"block_size"`
	MaxBlockSize int64 `json:"max_block_size"`
	LeaseTTLMS   int64 `json:"lease_ttl_ms"`
	// MaxID is the ceiling; zero in a record written before namespaces had one, meaning the default.
	MaxID     int64 `json:"max_id,omitempty"`
	CreatedUS int64 `json:"created_us"`
	UpdatedUS int64 `json:"updated_us"`
}

func (r record) namespace(name string) allocator.Namespace {
	return allocator.Namespace{Name: name, Start: r.Start, BlockSize: r.BlockSize, MaxBlockSize: r.MaxBlockSize,
		LeaseTTL: time.Duration(r.LeaseTTLMS) * time.Millisecond, MaxID: r.maxID(),
		Servers: []allocator.ServerState{{Server: ServerName, Next: r.Next, Step: 1, Offset: 1, Healthy: true}}}
}

func (r record) maxID() int64 {
	if r.MaxID == 0 {
		return allocator.DefaultMaxID
	}
	return r.MaxID
}

// Open opens (or creates) the store in cfg.Dir.
func Open(cfg Config) (*Store, error) {
	if err := allocator.CheckConfig("embedded.Config", allocator.Setting("LockTimeout", cfg.LockTimeout)); err != nil {
		return nil, err
	}
	allocator.Default(&cfg.Dir, "ticketd-data")
	allocator.Default(&cfg.LockTimeout, time.Second)
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.syncDir == nil {
		cfg.syncDir = syncDir
	}
	created := newDirs(cfg.Dir)
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: data directory: %w", err)
	}
	path := filepath.Join(cfg.Dir, FileName)
	_, statErr := os.Stat(path)
	newFile := errors.Is(statErr, os.ErrNotExist)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: cfg.LockTimeout})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("embedded: %s is locked by another process (another ticketd?); stop it or use another --data-dir", path)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("embedded: init %s: %w", path, err)
	}
	// bbolt syncs the file, not the directory entries that name it and the directories made for it: a
	// crash soon after the first lease could otherwise leave no file at all, and the counters would
	// start again from the beginning.
	if newFile {
		dirs := []string{cfg.Dir}
		for _, d := range created {
			dirs = append(dirs, filepath.Dir(d))
		}
		for _, d := range dirs {
			if err := cfg.syncDir(d); err != nil {
				db.Close()
				return nil, fmt.Errorf("embedded: sync %s: %w", d, err)
			}
		}
	}
	return &Store{db: db, path: path, now: cfg.now}, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the file. Safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// Health reports the one local "server".
func (s *Store) Health() []allocator.ServerHealth {
	return []allocator.ServerHealth{{Name: ServerName, Healthy: true, Step: 1, Offset: 1}}
}

// update runs fn in a write transaction, which bbolt syncs to disk before it returns.
func (s *Store) update(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(bucket)) })
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return allocator.ErrClosed
	}
	return err
}

func (s *Store) view(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(bucket)) })
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return allocator.ErrClosed
	}
	return err
}

func get(b *bolt.Bucket, name string) (record, error) {
	v := b.Get([]byte(name))
	if v == nil {
		return record{}, fmt.Errorf("%w: %q", allocator.ErrNotFound, name)
	}
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return record{}, fmt.Errorf("embedded: namespace %q is corrupt: %w", name, err)
	}
	return r, nil
}

func put(b *bolt.Bucket, name string, r record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return b.Put([]byte(name), v)
}

// Lease takes the next size IDs (0 means the namespace's block size).
func (s *Store) Lease(ctx context.Context, namespace string, size int64) (allocator.Block, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.Block{}, err
	}
	if size < 0 {
		return allocator.Block{}, allocator.ValidateSize(size, 1)
	}
	if err := ctx.Err(); err != nil {
		return allocator.Block{}, err
	}
	return s.commits.lease(ctx, s, leaseRequest{namespace: namespace, size: size})
}

// take leases one request's block inside tx's bucket, or says why it cannot (a request error, which
// leaves the bucket as it was).
func (s *Store) take(b *bolt.Bucket, q leaseRequest) (allocator.Block, error) {
	r, err := get(b, q.namespace)
	if err != nil {
		return allocator.Block{}, err
	}
	size := q.size
	if size == 0 {
		size = r.BlockSize
	}
	if err := allocator.ValidateSize(size, r.MaxBlockSize); err != nil {
		return allocator.Block{}, err
	}
	// The last block below the ceiling is cut to what is left; the counter, one past the last ID, stays
	// an int64.
	if size = allocator.Fit(r.Next, 1, size, min(r.maxID(), math.MaxInt64-1)); size == 0 {
		return allocator.Block{}, fmt.Errorf("%w: namespace %q reached its max_id %d (counter %d)", allocator.ErrExhausted, q.namespace, r.maxID(), r.Next)
	}
	end := r.Next + size
	blk, err := allocator.BlockEnding(q.namespace, ServerName, end, 1, size, allocator.ExpiryFor(s.now(), time.Duration(r.LeaseTTLMS)*time.Millisecond))
	if err != nil {
		return allocator.Block{}, err
	}
	r.Next = end
	return blk, put(b, q.namespace, r)
}

// CreateNamespace creates a namespace; ErrExists if it exists.
func (s *Store) CreateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	now := s.now().UnixMicro()
	r := record{Next: ns.Start, Start: ns.Start, BlockSize: ns.BlockSize, MaxBlockSize: ns.MaxBlockSize,
		LeaseTTLMS: ns.LeaseTTL.Milliseconds(), MaxID: ns.MaxID, CreatedUS: now, UpdatedUS: now}
	err := s.update(ctx, func(b *bolt.Bucket) error {
		if b.Get([]byte(ns.Name)) != nil {
			return fmt.Errorf("%w: %q", allocator.ErrExists, ns.Name)
		}
		return put(b, ns.Name, r)
	})
	if err != nil {
		return allocator.Namespace{}, err
	}
	return r.namespace(ns.Name), nil
}

// UpdateNamespace replaces the settings (zero fields mean their defaults); a Start above the counter
// advances it, and the counter never moves back. A max_id below an ID already issued (or below the
// start) is refused with ErrInvalidSettings.
func (s *Store) UpdateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	advance := ns.Start
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	var out allocator.Namespace
	err := s.update(ctx, func(b *bolt.Bucket) error {
		r, err := get(b, ns.Name)
		if err != nil {
			return err
		}
		if ns.MaxID < r.Start {
			return fmt.Errorf("%w: max_id %d must be at least start %d", allocator.ErrInvalidSettings, ns.MaxID, r.Start)
		}
		if err := allocator.CheckLowering(ns.Name, ns.MaxID, r.Next-1); err != nil {
			return err
		}
		r.BlockSize, r.MaxBlockSize, r.LeaseTTLMS, r.MaxID = ns.BlockSize, ns.MaxBlockSize, ns.LeaseTTL.Milliseconds(), ns.MaxID
		r.Next = max(r.Next, advance)
		r.UpdatedUS = s.now().UnixMicro()
		out = r.namespace(ns.Name)
		return put(b, ns.Name, r)
	})
	return out, err
}

// Namespace returns a namespace and its counter.
func (s *Store) Namespace(ctx context.Context, name string) (allocator.Namespace, error) {
	if err := allocator.ValidateName(name); err != nil {
		return allocator.Namespace{}, err
	}
	var out allocator.Namespace
	err := s.view(ctx, func(b *bolt.Bucket) error {
		r, err := get(b, name)
		out = r.namespace(name)
		return err
	})
	return out, err
}

// Namespaces lists every namespace sorted by name.
func (s *Store) Namespaces(ctx context.Context) ([]allocator.Namespace, error) {
	var out []allocator.Namespace
	err := s.view(ctx, func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("embedded: namespace %q is corrupt: %w", k, err)
			}
			out = append(out, r.namespace(string(k)))
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// newDirs lists the directories MkdirAll(dir) would create, deepest first.
func newDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; {
		if _, err := os.Stat(d); err == nil {
			return out
		}
		out = append(out, d)
		parent := filepath.Dir(d)
		if parent == d {
			return out
		}
		d = parent
	}
}

// syncDir flushes a directory's entries to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
