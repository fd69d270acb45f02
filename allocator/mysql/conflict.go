package mysql

import (
	"context"
	"errors"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/internal/backoff"
)

// Errors the server returns after rolling a statement back because it met a concurrent write: run
// again, the statement succeeds. A Galera cluster reports a write that lost to a concurrent write of
// the same row on another node (certification) as a deadlock.
const (
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
)

// isConflict reports whether err is a statement rolled back for a concurrent write.
func isConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout)
}

// conflictTries bounds the runs of a write that keeps meeting conflicts; the waits between them grow
// from 10 ms to at most 200 ms, jittered, so that writers that met each other part.
const conflictTries = 8

// retryConflicts runs write, and runs it again after a short jittered wait while it fails with a
// conflict, a few times at most and never past ctx. write must be one statement run on its own (its
// own transaction): a conflict rolls it back whole, so run again it takes effect once. sleep is the
// Store's (see allocator.Runtime).
func retryConflicts(ctx context.Context, sleep func(context.Context, time.Duration) bool, write func() error) error {
	wait := backoff.Policy{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}
	for try := 1; ; try++ {
		err := write()
		if err == nil || !isConflict(err) || try == conflictTries {
			return err
		}
		if !sleep(ctx, wait.Wait(try)) {
			return err
		}
	}
}
