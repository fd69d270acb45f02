package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/internal/testservers"
)

// redisServers is two throwaway Redis instances (append-only file, fsync always) the run owns, and a
// third that a fault has replicate a (REPLICAOF) and then promotes in a's place.
type redisServers struct {
	cfg     Config
	log     *slog.Logger
	inst    [2]*testservers.Redis
	replica *testservers.Redis
	ownDir  string
}

func (s *redisServers) start(ctx context.Context) error {
	dir := s.cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tkr")
		if err != nil {
			return err
		}
		dir, s.ownDir = d, d
	}
	for i := range s.inst {
		r, err := testservers.StartRedis(ctx, testservers.RedisOptions{Dir: filepath.Join(dir, "redis-"+label(i))})
		if err != nil {
			return fmt.Errorf("chaos: starting Redis %s: %w", label(i), err)
		}
		s.inst[i] = r
	}
	r, err := testservers.StartRedis(ctx, testservers.RedisOptions{Dir: filepath.Join(dir, "redis-r")})
	if err != nil {
		return fmt.Errorf("chaos: starting a's replica: %w", err)
	}
	s.replica = r
	s.log.Info("chaos: Redis instances up", "a", s.inst[0].Port, "b", s.inst[1].Port, "a's replica", s.replica.Port)
	return nil
}

func (s *redisServers) addrs() []string { return []string{s.inst[0].Addr(), s.inst[1].Addr()} }

func (s *redisServers) layout() layout { return pairLayout }

func (s *redisServers) open(ctx context.Context, ends []endpoint, obs allocator.Observer, log *slog.Logger) (leaser, error) {
	var addrs []string
	for _, e := range ends {
		addrs = append(addrs, e.addr)
	}
	return redis.Open(ctx, redis.Config{Addrs: addrs, Logger: log, Observer: obs,
		Failover: allocator.Failover{AttemptTimeout: 700 * time.Millisecond, Timeout: 3 * time.Second, MaxBackoff: time.Second}})
}

func (s *redisServers) kill(i int) error                         { return s.inst[i].Kill() }
func (s *redisServers) restart(ctx context.Context, i int) error { return s.inst[i].Start(ctx) }
func (s *redisServers) canKill() bool                            { return true }

func (s *redisServers) close() {
	for _, r := range []*testservers.Redis{s.inst[0], s.inst[1], s.replica} {
		if r != nil {
			_ = r.Kill()
		}
	}
	if s.ownDir != "" {
		_ = os.RemoveAll(s.ownDir)
	}
}

// faults: an instance that lost its data, a replica restarted with the instances listed in the other
// order, and a's replica promoted in its place.
func (s *redisServers) faults(w *world) []fault {
	wiped := fault{name: "Redis b's data lost (killed, its append-only files deleted, started empty)", expect: ExpectFenced,
		apply: func(ctx context.Context, _ *FaultResult) error {
			if err := s.inst[1].Kill(); err != nil {
				return err
			}
			for _, f := range []string{"appendonlydir", "dump.rdb"} {
				if err := os.RemoveAll(filepath.Join(s.inst[1].Dir(), f)); err != nil {
					return err
				}
			}
			return w.servers.restart(ctx, 1)
		},
		revert: func(ctx context.Context, res *FaultResult) error { return w.repairFenced(ctx, 1, res) }}
	return []fault{
		at(slotSettings, wiped),
		at(slotPromote, w.replicaPromoted(s)),
		at(slotRestoreCold, fault{name: "replica 2 restarted with the Redis instances in the other order while Redis a is down", expect: ExpectRefused,
			apply: func(ctx context.Context, res *FaultResult) error {
				if err := s.inst[0].Kill(); err != nil {
					return err
				}
				w.stopReplica(1)
				err := w.startReplica(ctx, 1, []int{1, 0})
				switch {
				case errors.Is(err, allocator.ErrMisconfigured):
					res.FencedOrRefused, res.Detail = true, "replica 2 refused to start: "+err.Error()
					return nil
				case err != nil:
					return err
				}
				// It started: it must have refused the instance it would give the other's offset.
				res.FencedOrRefused = waitUntil(fencedWithin, func() bool {
					h, ok := w.health(1, 1)
					return ok && refused(h)
				})
				h, _ := w.health(1, 1)
				res.Detail = "replica 2 started; Redis b: " + healthText(h)
				return nil
			},
			revert: func(ctx context.Context, _ *FaultResult) error {
				w.stopReplica(1)
				if err := w.servers.restart(ctx, 0); err != nil {
					return err
				}
				return w.startReplica(ctx, 1, []int{0, 1})
			}}),
	}
}

// follow has a's replica replicate a (a full copy, then the stream) and waits until it has caught up.
func (s *redisServers) follow(ctx context.Context) error {
	if err := s.replica.Follow(ctx, s.inst[0]); err != nil {
		return err
	}
	return s.replica.CaughtUp(ctx, s.inst[0])
}

// freeze catches up, then has the replica stop following a (REPLICAOF NO ONE).
func (s *redisServers) freeze(ctx context.Context) error {
	if err := s.replica.CaughtUp(ctx, s.inst[0]); err != nil {
		return err
	}
	return s.replica.Detach(ctx)
}

// promote kills a; its replica, no longer following anything, is instance a from now on.
func (s *redisServers) promote(context.Context) (string, error) {
	if err := s.inst[0].Kill(); err != nil {
		return "", err
	}
	s.inst[0], s.replica = s.replica, s.inst[0]
	return s.inst[0].Addr(), nil
}
