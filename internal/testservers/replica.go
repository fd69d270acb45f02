package testservers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// caughtUpWithin bounds how long CaughtUp waits for a replica.
const caughtUpWithin = 30 * time.Second

// Follow makes m an asynchronous replica of src, from the beginning of src's binary log (src must
// keep one, see Binlog; m needs a server_id of its own and is best started with --skip-slave-start).
// It returns once replication runs; CaughtUp waits until m holds everything src logged.
func (m *MariaDB) Follow(ctx context.Context, src *MariaDB) error {
	return m.execSQL(ctx,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=slave_pos", src.Port),
		"START SLAVE")
}

// CaughtUp waits until the replica m has applied everything src logged so far.
func (m *MariaDB) CaughtUp(ctx context.Context, src *MariaDB) error {
	sdb, err := sql.Open("mysql", src.DSN(""))
	if err != nil {
		return err
	}
	defer sdb.Close()
	var pos string
	if err := sdb.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		return err
	}
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	var waited int
	if err := db.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, caughtUpWithin.Seconds()).Scan(&waited); err != nil || waited != 0 {
		return fmt.Errorf("testservers: the replica on port %d did not catch up with %s within %s: %d, %v", m.Port, pos, caughtUpWithin, waited, err)
	}
	return nil
}

// StopFollowing stops m's replication: it lags behind its source from here on, and stays a replica.
func (m *MariaDB) StopFollowing(ctx context.Context) error { return m.execSQL(ctx, "STOP SLAVE") }

// Detach makes m a replica of nothing, as a promotion does (its replication must be stopped).
func (m *MariaDB) Detach(ctx context.Context) error { return m.execSQL(ctx, "RESET SLAVE ALL") }

// execSQL runs statements on m as root.
func (m *MariaDB) execSQL(ctx context.Context, stmts ...string) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("testservers: %s on port %d: %w", q, m.Port, err)
		}
	}
	return nil
}

// Follow makes r a replica of src (REPLICAOF: a full copy, then the stream). CaughtUp waits until it
// holds everything src wrote.
func (r *Redis) Follow(ctx context.Context, src *Redis) error {
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer c.Close()
	return c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(src.Port)).Err()
}

// CaughtUp waits until the replica r's link to src is up and it has applied all of src's replication
// stream.
func (r *Redis) CaughtUp(ctx context.Context, src *Redis) error {
	sc := goredis.NewClient(&goredis.Options{Addr: src.Addr()})
	defer sc.Close()
	rc := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer rc.Close()
	deadline := time.Now().Add(caughtUpWithin)
	for {
		want, err1 := replicationField(ctx, sc, "master_repl_offset")
		got, err2 := replicationField(ctx, rc, "slave_repl_offset")
		link, err3 := replicationField(ctx, rc, "master_link_status")
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		if link == "up" && want != "" && want == got {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testservers: the replica %s did not catch up within %s: link %s, offset %s of %s", r.Addr(), caughtUpWithin, link, got, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Detach makes r stop following its source (REPLICAOF NO ONE), keeping what it holds: it lags from
// here on, a server of its own.
func (r *Redis) Detach(ctx context.Context) error {
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer c.Close()
	return c.ReplicaOf(ctx, "NO", "ONE").Err()
}

// replicationField reads one field of INFO replication.
func replicationField(ctx context.Context, c *goredis.Client, field string) (string, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", nil
}
