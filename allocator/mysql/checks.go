package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ticketd/ticketd/allocator"
)

// readVars reads the settings that decide which IDs a server issues and whether they survive a crash:
// the server's global values, which a change on the running server moves at once (a session keeps the
// auto_increment values of the moment it connected).
func readVars(ctx context.Context, db *sql.DB) (serverVars, error) {
	var v serverVars
	var logBin int64
	err := db.QueryRowContext(ctx, `SELECT @@GLOBAL.auto_increment_increment, @@GLOBAL.auto_increment_offset,
		@@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.log_bin, @@GLOBAL.sync_binlog, @@GLOBAL.version`).
		Scan(&v.increment, &v.offset, &v.flushAtCommit, &logBin, &v.syncBinlog, &v.version)
	v.logBin = logBin == 1
	return v, err
}

// problems lists what is wrong with one server's own settings, each error saying how to fix it.
func (v serverVars) problems(name string) []error {
	var errs []error
	if v.flushAtCommit != 1 {
		errs = append(errs, fmt.Errorf("%w: innodb_flush_log_at_trx_commit is %d on %s: a crash could roll the counter back and reissue IDs; set innodb_flush_log_at_trx_commit=1",
			allocator.ErrMisconfigured, v.flushAtCommit, name))
	}
	if v.logBin && v.syncBinlog != 1 {
		errs = append(errs, fmt.Errorf("%w: the binary log is on and sync_binlog is %d on %s: after a crash a replica or restore could miss leases and reissue IDs; set sync_binlog=1",
			allocator.ErrMisconfigured, v.syncBinlog, name))
	}
	if v.offset < 1 || v.offset > v.increment {
		errs = append(errs, fmt.Errorf("%w: auto_increment_offset %d on %s is outside 1..auto_increment_increment (%d), where MySQL ignores it; set an offset in 1..%d",
			allocator.ErrMisconfigured, v.offset, name, v.increment, v.increment))
	}
	return errs
}

type namedVars struct {
	name string
	v    serverVars
}

// crossProblems compares servers' settings: one increment for all, a distinct offset each, and an
// increment no smaller than the number of servers configured.
func crossProblems(list []namedVars, servers int) []error {
	var errs []error
	byOffset := map[int64]string{}
	for i, s := range list {
		if i > 0 && s.v.increment != list[0].v.increment {
			errs = append(errs, fmt.Errorf("%w: auto_increment_increment is %d on %s but %d on %s; set the same increment (at least %d) on every ticket server",
				allocator.ErrMisconfigured, list[0].v.increment, list[0].name, s.v.increment, s.name, servers))
		}
		if other, dup := byOffset[s.v.offset]; dup {
			errs = append(errs, fmt.Errorf("%w: %s and %s share auto_increment_offset %d and would issue the same IDs; give each server its own offset (1..%d)",
				allocator.ErrMisconfigured, other, s.name, s.v.offset, servers))
		}
		byOffset[s.v.offset] = s.name
		if s.v.increment < int64(servers) {
			errs = append(errs, fmt.Errorf("%w: auto_increment_increment is %d on %s, below the %d ticket servers configured; set it to at least %d",
				allocator.ErrMisconfigured, s.v.increment, s.name, servers, servers))
		}
	}
	return errs
}
