package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator/mysql"
)

// idSource hands out ticket IDs one at a time; safe for concurrent use. The SDK's Client is one.
type idSource interface {
	Next(ctx context.Context) (int64, error)
}

// createTickets64 is Flickr's own ticket table (code.flickr.net, 2010): one row, one stub; the server's
// auto-increment settings make the IDs. ticketd does not use it: the bench makes it for its baseline.
const createTickets64 = `CREATE TABLE IF NOT EXISTS Tickets64 (
  id   BIGINT(20) UNSIGNED NOT NULL AUTO_INCREMENT,
  stub CHAR(1) NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  UNIQUE KEY stub (stub)
) ENGINE=InnoDB`

// flickrTickets issues IDs the way Flickr's ticket servers do, one statement per ID: REPLACE INTO
// Tickets64 on the servers in turn, skipping one that fails. Safe for concurrent use.
type flickrTickets struct {
	dbs     []*sql.DB
	names   []string
	next    atomic.Uint64
	timeout time.Duration // of one call, every server tried
}

// flickrLoadCase takes one ID per call from Flickr's ticket servers, REPLACE INTO Tickets64 on the
// servers of --mysql (servers says what it names): the baseline the leases are measured against.
func flickrLoadCase(env *mysqlEnv, servers string) loadCase {
	return loadCase{
		name: "Flickr REPLACE INTO, one ID per call (" + servers + ")",
		open: func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
			f, err := openFlickrTickets(ctx, env.dsns, maxConns, opTimeout)
			if err != nil {
				return nil, nil, err
			}
			return func(ctx context.Context) (int64, error) {
				_, _, err := f.Ticket(ctx)
				return 1, err
			}, f.Close, nil
		},
	}
}

// openFlickrTickets connects to the servers (DSNs with their database) and creates Tickets64 where
// it is missing.
func openFlickrTickets(ctx context.Context, dsns []string, maxConns int, timeout time.Duration) (*flickrTickets, error) {
	f := &flickrTickets{timeout: timeout}
	for _, dsn := range dsns {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			f.Close()
			return nil, err
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		f.dbs, f.names = append(f.dbs, db), append(f.names, mysql.ServerName(dsn))
		if _, err := db.ExecContext(ctx, createTickets64); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: creating Tickets64: %w", mysql.ServerName(dsn), err)
		}
	}
	return f, nil
}

// Ticket issues one ID and names the server that issued it. A deadlock (Flickr's REPLACE under
// contention) is the call's error, not a dead server: it is returned at once.
func (f *flickrTickets) Ticket(ctx context.Context) (id int64, server string, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	first := f.next.Add(1)
	var errs []error
	for i := range f.dbs {
		k := int((first + uint64(i)) % uint64(len(f.dbs)))
		res, err := f.dbs[k].ExecContext(ctx, "REPLACE INTO Tickets64 (stub) VALUES ('a')")
		if err == nil {
			id, err = res.LastInsertId()
		}
		if err == nil {
			return id, f.names[k], nil
		}
		if isDeadlock(err) {
			return 0, f.names[k], err
		}
		errs = append(errs, fmt.Errorf("%s: %w", f.names[k], err))
	}
	return 0, "", fmt.Errorf("ticket: %w", errors.Join(errs...))
}

// Close closes the connections.
func (f *flickrTickets) Close() {
	for _, db := range f.dbs {
		_ = db.Close()
	}
}

func isDeadlock(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}
