package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
)

// tableName is what a Flickr ticket table's name may look like; anything else never reaches a query.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// FlickrTable is a per-ID ticket table (Flickr's Tickets64) on one server.
type FlickrTable struct {
	Server string
	// AutoIncrement is the next value the table would hand out: above every ticket it ever issued,
	// including those whose rows were replaced since.
	AutoIncrement int64
	// MaxID is the highest id left in the table (the stub row), which is not always the highest issued.
	MaxID int64
}

// FlickrTables reads a per-ID ticket table on every server; every server must answer, since the
// tickets of one that does not are unknown.
func (p *Store) FlickrTables(ctx context.Context, table string) ([]FlickrTable, error) {
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("table name %q must match %s", table, tableName)
	}
	out := make([]FlickrTable, 0, len(p.set.All()))
	for _, s := range p.set.All() {
		ft, err := s.flickrTable(ctx, table)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		out = append(out, ft)
	}
	return out, nil
}

func (s *server) flickrTable(ctx context.Context, table string) (FlickrTable, error) {
	conn, err := s.ctl.Conn(ctx)
	if err != nil {
		return FlickrTable{}, err
	}
	defer conn.Close()
	// MySQL 8 caches AUTO_INCREMENT in information_schema for a day unless told not to; MariaDB has no
	// such variable and reads it live.
	if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil {
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1193 {
			return FlickrTable{}, err
		}
	}
	ft := FlickrTable{Server: s.Name()}
	var auto sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&auto)
	if errors.Is(err, sql.ErrNoRows) {
		// information_schema lists only the tables the user may use: ask the table itself whether it is
		// missing or hidden.
		_, err := conn.ExecContext(ctx, "SELECT 1 FROM `"+table+"` LIMIT 0")
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1142 || me.Number == 1143) {
			return ft, fmt.Errorf("table %q exists, but this user may not read it: GRANT SELECT ON the table to the user of the DSN, or give a DSN whose user may (%s)", table, me.Message)
		}
		return ft, fmt.Errorf("no table %q in this database", table)
	}
	if err != nil {
		return ft, err
	}
	var maxID sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT MAX(id) FROM `"+table+"`").Scan(&maxID); err != nil {
		return ft, err
	}
	ft.AutoIncrement, ft.MaxID = auto.Int64, maxID.Int64
	return ft, nil
}

// AdoptStart is the first ID a namespace taking over from per-ID tables may issue: above every
// table's AUTO_INCREMENT and highest row, plus margin (for tickets issued while switching over).
func AdoptStart(tables []FlickrTable, margin int64) (int64, error) {
	var start int64 = 1
	for _, t := range tables {
		start = max(start, t.AutoIncrement, t.MaxID+1)
	}
	if margin < 0 || start > math.MaxInt64-margin {
		return 0, fmt.Errorf("%w: start %d plus margin %d", allocator.ErrExhausted, start, margin)
	}
	return start + margin, nil
}
