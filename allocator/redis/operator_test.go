package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// fleet is two private Redis instances, and the configuration every process of a test opens them with.
type fleet struct {
	t    *testing.T
	pair [2]*testservers.Redis
	cfg  Config
}

func newFleet(t *testing.T) *fleet {
	pair := privatePair(t)
	return &fleet{t: t, pair: pair, cfg: testConfig(pair[0].Addr(), pair[1].Addr())}
}

func (f *fleet) Open(t *testing.T) allocator.Backend { return openStore(t, f.cfg) }

func (f *fleet) Name(i int) string { return f.pair[i].Addr() }

func (f *fleet) Stop(i int) error { return f.pair[i].Kill() }

func (f *fleet) Start(ctx context.Context, i int) error { return f.pair[i].Start(ctx) }

// keysOf returns every key of the fleet's prefix on instance i.
func (f *fleet) keysOf(ctx context.Context, c *goredis.Client) ([]string, error) {
	var out []string
	iter := c.Scan(ctx, 0, f.cfg.KeyPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	return out, iter.Err()
}

// Backup DUMPs every key of the prefix on instance i; restore puts the dataset back as it was — keys
// RESTOREd, keys made since deleted — into the running instance.
func (f *fleet) Backup(ctx context.Context, i int) (func(context.Context) error, error) {
	c := rawClient(f.t, f.pair[i].Addr())
	keys, err := f.keysOf(ctx, c)
	if err != nil {
		return nil, err
	}
	dump := map[string]string{}
	for _, k := range keys {
		v, err := c.Dump(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		dump[k] = v
	}
	return func(ctx context.Context) error {
		now, err := f.keysOf(ctx, c)
		if err != nil {
			return err
		}
		pipe := c.TxPipeline()
		for _, k := range now {
			if _, ok := dump[k]; !ok {
				pipe.Del(ctx, k)
			}
		}
		for k, v := range dump {
			pipe.RestoreReplace(ctx, k, 0, v)
		}
		_, err = pipe.Exec(ctx)
		return err
	}, nil
}

// Wipe deletes every key of the prefix on the running instance i.
func (f *fleet) Wipe(ctx context.Context, i int) error {
	c := rawClient(f.t, f.pair[i].Addr())
	keys, err := f.keysOf(ctx, c)
	if err != nil || len(keys) == 0 {
		return err
	}
	return c.Del(ctx, keys...).Err()
}

// restartFrom stops instance i and starts it on the append-only files in dir (a copy taken earlier),
// or on none when dir is empty: an instance restarted from an old backup, or one that lost its disk.
func (f *fleet) restartFrom(ctx context.Context, i int, dir string) error {
	r := f.pair[i]
	if err := r.Kill(); err != nil {
		return err
	}
	if err := f.putAOF(i, dir); err != nil {
		return err
	}
	return r.Start(ctx)
}

// putAOF puts the append-only files in dir (none when dir is empty) in place of those of instance i,
// which must be stopped.
func (f *fleet) putAOF(i int, dir string) error {
	aof := filepath.Join(f.pair[i].Dir(), "appendonlydir")
	if err := os.RemoveAll(aof); err != nil {
		return err
	}
	if dir != "" {
		if out, err := exec.Command("cp", "-a", dir, aof).CombinedOutput(); err != nil {
			return fmt.Errorf("cp: %v: %s", err, out)
		}
	}
	return nil
}

// copyAOF takes a cold copy of instance i's append-only files (stopping and restarting it).
func (f *fleet) copyAOF(ctx context.Context, i int) (string, error) {
	r := f.pair[i]
	if err := r.Kill(); err != nil {
		return "", err
	}
	dst := filepath.Join(f.t.TempDir(), "aof")
	if out, err := exec.Command("cp", "-a", filepath.Join(r.Dir(), "appendonlydir"), dst).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cp: %v: %s", err, out)
	}
	return dst, r.Start(ctx)
}

// ColdCopy takes a cold copy of instance i's append-only files; putBack puts it in place of the
// stopped instance's.
func (f *fleet) ColdCopy(ctx context.Context, i int) (func() error, error) {
	dir, err := f.copyAOF(ctx, i)
	if err != nil {
		return nil, err
	}
	return func() error { return f.putAOF(i, dir) }, nil
}

// Process opens a store as a process of its own, tuned by o. Proxied, it reaches each instance through
// a toxiproxy of its own, and keeps the instances' own names.
func (f *fleet) Process(t *testing.T, o allocatortest.ProcessOptions) *allocatortest.Process {
	cfg := f.cfg
	cfg.Addrs = append([]string(nil), cfg.Addrs...)
	var cut func(i int)
	if o.Proxied {
		toxi := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		proxies := make([]*toxiproxy.Proxy, len(cfg.Addrs))
		for i, addr := range cfg.Addrs {
			proxies[i] = toxiproxy.NewProxy(toxi, fmt.Sprintf("instance-%d", i), "127.0.0.1:0", addr)
			if err := proxies[i].Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxies[i].Stop)
			cfg.Addrs[i] = proxies[i].Listen
		}
		cfg.Names = []string{f.Name(0), f.Name(1)}
		cut = func(i int) { proxies[i].Stop() }
	}
	if o.WatermarkInterval > 0 {
		cfg.WatermarkInterval = o.WatermarkInterval
	}
	if o.SettingsTTL > 0 {
		cfg.SettingsTTL = o.SettingsTTL
	}
	if o.ProbeInterval > 0 {
		cfg.ProbeInterval = o.ProbeInterval
	}
	cfg.beforeChange, cfg.marksWriting = o.BeforeChange, o.MarksWriting
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return allocatortest.NewProcess(s, cut, func() { s.set.Close(s.closeClients) })
}

// replica is a Redis that replicates instance i of the fleet.
type replica struct {
	f *fleet
	i int
	r *testservers.Redis
}

// Replicate starts a Redis (append-only, as ticketd requires) that replicates instance i, and waits
// until it holds everything instance i does.
func (f *fleet) Replicate(ctx context.Context, i int) (allocatortest.Replica, error) {
	r := testenv.PrivateRedis(f.t, testservers.RedisOptions{})
	if err := r.Follow(ctx, f.pair[i]); err != nil {
		return nil, err
	}
	return &replica{f: f, i: i, r: r}, r.CaughtUp(ctx, f.pair[i])
}

// Freeze catches up, then makes the replica stop following its source.
func (r *replica) Freeze(ctx context.Context) error {
	if err := r.r.CaughtUp(ctx, r.f.pair[r.i]); err != nil {
		return err
	}
	return r.r.Detach(ctx)
}

// Promote kills the instance and starts the replica, on its own append-only files, on the instance's
// port.
func (r *replica) Promote(ctx context.Context) error {
	old := r.f.pair[r.i]
	if err := old.Kill(); err != nil {
		return err
	}
	if err := r.r.Kill(); err != nil {
		return err
	}
	n, err := testservers.StartRedis(ctx, testservers.RedisOptions{Dir: r.r.Dir(), Port: old.Port})
	if err != nil {
		return err
	}
	r.f.t.Cleanup(func() { _ = n.Kill() })
	r.f.pair[r.i], r.r = n, n
	return nil
}

func TestOperatorFaults(t *testing.T) {
	allocatortest.RunOperatorFaults(t, func(t *testing.T) allocatortest.Fleet { return newFleet(t) })
}
