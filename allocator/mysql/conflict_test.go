package mysql

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
)

// TestRetryConflicts: a write rolled back for a conflict (a deadlock, as Galera reports a lost
// certification, or a lock wait timeout) runs again until it succeeds, a few times at most and never
// past its context; any other error ends it at once.
func TestRetryConflicts(t *testing.T) {
	deadlock := fmt.Errorf("water mark of a on b: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"})
	lockWait := &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded; try restarting transaction"}
	denied := &mysql.MySQLError{Number: 1142, Message: "INSERT command denied"}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		errs  []error // what each run returns; nil after the last
		runs  int
		final error
	}{
		{"succeeds at once", context.Background(), nil, 1, nil},
		{"deadlocks, then succeeds", context.Background(), []error{deadlock, lockWait, deadlock}, 4, nil},
		{"keeps deadlocking", context.Background(), []error{deadlock, deadlock, deadlock, deadlock, deadlock, deadlock, deadlock, deadlock, deadlock}, conflictTries, deadlock},
		{"another error", context.Background(), []error{denied}, 1, denied},
		{"context ended", canceled, []error{deadlock, deadlock}, 1, deadlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			err := retryConflicts(tc.ctx, allocator.Sleep, func() error {
				runs++
				if runs <= len(tc.errs) {
					return tc.errs[runs-1]
				}
				return nil
			})
			if runs != tc.runs || !errors.Is(err, tc.final) || (tc.final == nil && err != nil) {
				t.Fatalf("%d runs, %v; want %d runs, %v", runs, err, tc.runs, tc.final)
			}
		})
	}
}
