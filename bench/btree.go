package bench

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"

	"github.com/ticketd/ticketd/bench/snowflake"
)

// btreeWriters is how many ticket clients (and Snowflake workers) feed one table at once, their IDs
// interleaved row by row, as several application servers would.
const btreeWriters = 4

// Fill thresholds: a table rebuilt by ALTER TABLE … FORCE has its pages filled to 15/16; inserts at the
// right-most page leave pages about as full, random inserts leave them around ln 2 ≈ 69% full.
const (
	rightMostFill = 0.85 // as-inserted pages at least this full (relative to a rebuild): right-most inserts
	// widerIndex is how much bigger a secondary index must be than the BIGINT one to count as grown.
	widerIndex = 1.1
	// minVerdictBytes is the smallest index a verdict is drawn from. InnoDB grows an index by whole
	// extents of 1 MiB (several at a time once it is large), so a smaller index's size is mostly the
	// allocation's step: 20,000 random UUIDs measure as full as a rebuilt table.
	minVerdictBytes = 16 << 20
)

// btreeKey is one primary-key scheme of the B-tree comparison.
type btreeKey struct {
	name, table, column string
	auto                bool
	// random says what the article claims: true for keys that land on random pages.
	random bool
	// wide is a key wider than BIGINT: the article says it grows every secondary index.
	wide bool
	// open returns a function that gives the next key as an SQL literal, and a cleanup.
	open func(ctx context.Context) (func() (string, error), func(), error)
}

func btreeKeys(env *mysqlEnv) []btreeKey {
	lit := func(f func() ([]byte, error)) func(context.Context) (func() (string, error), func(), error) {
		return func(context.Context) (func() (string, error), func(), error) {
			return func() (string, error) {
				b, err := f()
				return "X'" + hex.EncodeToString(b) + "'", err
			}, func() {}, nil
		}
	}
	return []btreeKey{
		{name: "BIGINT AUTO_INCREMENT", table: "bt_auto", column: "BIGINT NOT NULL AUTO_INCREMENT", auto: true},
		{name: fmt.Sprintf("BIGINT tickets (%d clients)", btreeWriters), table: "bt_ticket", column: "BIGINT NOT NULL",
			open: func(ctx context.Context) (func() (string, error), func(), error) { return ticketKeys(ctx, env) }},
		{name: fmt.Sprintf("BIGINT Snowflake (%d workers)", btreeWriters), table: "bt_snowflake", column: "BIGINT NOT NULL",
			open: snowflakeKeys},
		{name: "BINARY(16) UUIDv4", table: "bt_uuid4", column: "BINARY(16) NOT NULL", random: true, wide: true,
			open: lit(func() ([]byte, error) { u, err := uuid.NewRandom(); return u[:], err })},
		{name: "BINARY(16) UUIDv7", table: "bt_uuid7", column: "BINARY(16) NOT NULL", wide: true,
			open: lit(func() ([]byte, error) { u, err := uuid.NewV7(); return u[:], err })},
		{name: "BINARY(16) ULID", table: "bt_ulid", column: "BINARY(16) NOT NULL", wide: true,
			open: lit(func() ([]byte, error) { u := ulid.Make(); return u[:], nil })},
		{name: "CHAR(36) UUIDv4 text", table: "bt_uuid4_text", column: "CHAR(36) CHARACTER SET ascii NOT NULL", random: true, wide: true,
			open: func(context.Context) (func() (string, error), func(), error) {
				return func() (string, error) { u, err := uuid.NewRandom(); return "'" + u.String() + "'", err }, func() {}, nil
			}},
	}
}

// ticketKeys gives IDs from several ticket clients in turn, each with its own cached blocks.
func ticketKeys(ctx context.Context, env *mysqlEnv) (func() (string, error), func(), error) {
	ns, err := env.namespace(ctx, env.pair, "btree", 1000)
	if err != nil {
		return nil, nil, err
	}
	var srcs []idSource
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for range btreeWriters {
		s, c, err := newTicketSource(ctx, env.pair, ns, 0)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		srcs, closers = append(srcs, s), append(closers, c)
	}
	i := 0
	return func() (string, error) {
		id, err := srcs[i%len(srcs)].Next(ctx)
		i++
		return strconv.FormatInt(id, 10), err
	}, closeAll, nil
}

func snowflakeKeys(context.Context) (func() (string, error), func(), error) {
	var gens []*snowflake.Generator
	for w := range btreeWriters {
		g, err := snowflake.New(snowflake.Config{Worker: int64(w + 1)})
		if err != nil {
			return nil, nil, err
		}
		gens = append(gens, g)
	}
	i := 0
	return func() (string, error) {
		id, err := gens[i%len(gens)].Next()
		i++
		return strconv.FormatUint(id, 10), err
	}, func() {}, nil
}

// BTreeRow is one key scheme's table.
type BTreeRow struct {
	Key string `json:"key"`
	// RowsPerSecond is rows over time spent in INSERT statements; LastTenth the same over the last 10%.
	RowsPerSecond          float64 `json:"rows_per_second"`
	RowsPerSecondLastTenth float64 `json:"rows_per_second_last_10pct"`
	// DataBytes is the clustered index (the rows), IndexBytes the secondary index, after ANALYZE TABLE.
	DataBytes  int64 `json:"data_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// RebuiltDataBytes is DataBytes after ALTER TABLE … FORCE; Fill = RebuiltDataBytes/DataBytes, how full
	// the inserted pages were compared with a fresh rebuild.
	RebuiltDataBytes int64   `json:"rebuilt_data_bytes"`
	Fill             float64 `json:"fill"`
	// PageSplits is the change of innodb_metrics index_page_splits over the inserts (-1: not readable).
	PageSplits int64 `json:"page_splits"`
	// Claim is what the article says about this key; Agrees whether the measurement bears it out.
	Claim  string `json:"claim"`
	Agrees bool   `json:"agrees"`
	// Judged says whether the indexes were large enough for a verdict (minVerdictBytes); when not,
	// Agrees is false and means nothing.
	Judged bool   `json:"judged"`
	Why    string `json:"why"`
	Error  string `json:"error,omitempty"`
}

// BTreeReport is the B-tree comparison.
type BTreeReport struct {
	RowsPerTable int    `json:"rows_per_table"`
	Batch        int    `json:"batch"`
	Server       string `json:"server"`
	Note         string `json:"note,omitempty"`
	// NoVerdict says why some tables got no verdict, and how many rows would give one; empty when every
	// table got one.
	NoVerdict string     `json:"no_verdict,omitempty"`
	Rows      []BTreeRow `json:"rows"`
}

func runBTree(ctx context.Context, opts Options, env *mysqlEnv) (*BTreeReport, error) {
	db := env.dbs[0]
	db.SetMaxOpenConns(4)
	rep := &BTreeReport{RowsPerTable: opts.Rows, Batch: opts.Batch, Server: serverName(env.dsns[0])}
	metrics := true
	if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_monitor_enable = 'module_index'"); err != nil {
		metrics = false
		rep.Note = "page split counters unavailable: " + err.Error()
	}
	for _, k := range btreeKeys(env) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		opts.line.begin("btree", k.name)
		row, err := insertTable(ctx, opts, db, k, metrics)
		if err != nil {
			row.Error = err.Error()
		}
		rep.Rows = append(rep.Rows, row)
		opts.line.end()
	}
	judge(rep.Rows, btreeKeys(env))
	rep.NoVerdict = noVerdict(rep.Rows, btreeKeys(env), opts.Rows)
	return rep, nil
}

func serverName(dsn string) string {
	if i, j := strings.Index(dsn, "("), strings.Index(dsn, ")"); i >= 0 && j > i {
		return dsn[i+1 : j]
	}
	return "?"
}

func pageSplits(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'index_page_splits'").Scan(&n)
	return n, err
}

func tableSize(ctx context.Context, db *sql.DB, table string) (data, index int64, err error) {
	rows, err := db.QueryContext(ctx, "ANALYZE TABLE "+table)
	if err != nil {
		return 0, 0, err
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		return 0, 0, err
	}
	err = db.QueryRowContext(ctx, "SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&data, &index)
	return data, index, err
}

// insertTable creates k's table, inserts opts.Rows rows in batches, measures it and drops it.
func insertTable(ctx context.Context, opts Options, db *sql.DB, k btreeKey, metrics bool) (BTreeRow, error) {
	row := BTreeRow{Key: k.name, PageSplits: -1}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+k.table); err != nil {
		return row, err
	}
	// created_at is a secondary index in insertion order, like a creation time: it adds no random
	// pages of its own, so the splits and the fill are the primary key's doing, and its size shows the
	// copy of the primary key that each entry carries.
	create := fmt.Sprintf("CREATE TABLE %s (id %s, created_at BIGINT NOT NULL, amount INT NOT NULL, PRIMARY KEY (id), KEY by_created (created_at)) ENGINE=InnoDB",
		k.table, k.column)
	if _, err := db.ExecContext(ctx, create); err != nil {
		return row, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _ = db.ExecContext(dctx, "DROP TABLE IF EXISTS "+k.table)
		cancel()
	}()
	next := func() (string, error) { return "", nil }
	if k.open != nil {
		n, done, err := k.open(ctx)
		if err != nil {
			return row, err
		}
		defer done()
		next = n
	}
	if metrics {
		_, _ = db.ExecContext(ctx, "SET GLOBAL innodb_monitor_reset = 'module_index'")
	}
	splitsBefore, splitErr := pageSplits(ctx, db)

	cols := "(id, created_at, amount)"
	if k.auto {
		cols = "(created_at, amount)"
	}
	tail := opts.Rows - opts.Rows/10 // rows from here on are the last 10%
	var total, last time.Duration
	var lastRows int
	var sb strings.Builder
	for done := 0; done < opts.Rows; {
		n := min(opts.Batch, opts.Rows-done)
		sb.Reset()
		sb.WriteString("INSERT INTO " + k.table + " " + cols + " VALUES ")
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('(')
			if !k.auto {
				id, err := next()
				if err != nil {
					return row, err
				}
				sb.WriteString(id)
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa(done + i))
			sb.WriteByte(',')
			sb.WriteString(strconv.Itoa(rand.IntN(1_000_000)))
			sb.WriteByte(')')
		}
		start := time.Now()
		if _, err := db.ExecContext(ctx, sb.String()); err != nil {
			return row, err
		}
		took := time.Since(start)
		total += took
		// The part of this batch that lies in the last 10% of rows, and that share of its time.
		if in := done + n - max(done, tail); in > 0 {
			last += took * time.Duration(in) / time.Duration(n)
			lastRows += in
		}
		done += n
		// The inserts are about half of a table's time; the rebuild and the measures, the rest.
		opts.line.update(fmt.Sprintf("%d%% inserted", 100*done/opts.Rows), 0.5*float64(done)/float64(opts.Rows))
	}
	row.RowsPerSecond = float64(opts.Rows) / total.Seconds()
	if lastRows > 0 {
		row.RowsPerSecondLastTenth = float64(lastRows) / last.Seconds()
	}
	if splitErr == nil {
		if after, err := pageSplits(ctx, db); err == nil {
			row.PageSplits = after - splitsBefore
		}
	}
	var err error
	if row.DataBytes, row.IndexBytes, err = tableSize(ctx, db, k.table); err != nil {
		return row, err
	}
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+k.table+" FORCE"); err != nil {
		return row, err
	}
	if row.RebuiltDataBytes, _, err = tableSize(ctx, db, k.table); err != nil {
		return row, err
	}
	if row.DataBytes > 0 {
		row.Fill = float64(row.RebuiltDataBytes) / float64(row.DataBytes)
	}
	return row, nil
}

// narrowIndexBytes is the mean secondary index size of the tables with a BIGINT key.
func narrowIndexBytes(rows []BTreeRow, keys []btreeKey) float64 {
	var narrowIndex []int64
	for i, r := range rows {
		if r.Error == "" && !keys[i].wide {
			narrowIndex = append(narrowIndex, r.IndexBytes)
		}
	}
	var narrow float64
	for _, b := range narrowIndex {
		narrow += float64(b) / float64(len(narrowIndex))
	}
	return narrow
}

// verdictSizes are the index sizes a row's verdict compares: its clustered index as inserted and
// rebuilt, and for a wide key its secondary index and the BIGINT tables' mean.
func verdictSizes(r BTreeRow, k btreeKey, narrow float64) []float64 {
	sizes := []float64{float64(r.DataBytes), float64(r.RebuiltDataBytes)}
	if k.wide {
		sizes = append(sizes, float64(r.IndexBytes), narrow)
	}
	return sizes
}

// judge sets each row's claim and whether its own numbers (and the BIGINT tables', for index size)
// bear it out; a row whose indexes are too small for a verdict gets none.
func judge(rows []BTreeRow, keys []btreeKey) {
	narrow := narrowIndexBytes(rows, keys)
	for i := range rows {
		r, k := &rows[i], keys[i]
		if r.Error != "" {
			continue
		}
		r.Judged = true
		for _, b := range verdictSizes(*r, k, narrow) {
			r.Judged = r.Judged && b >= minVerdictBytes
		}
		if k.random {
			r.Claim = "random pages: full pages split, the index is sparse"
			r.Agrees = r.Fill < rightMostFill
			r.Why = fmt.Sprintf("pages %.0f%% as full as after a rebuild", 100*r.Fill)
		} else {
			r.Claim = "right-most page: pages fill up in order"
			r.Agrees = r.Fill >= rightMostFill
			r.Why = fmt.Sprintf("pages %.0f%% as full as after a rebuild", 100*r.Fill)
		}
		if k.wide && narrow > 0 {
			ratio := float64(r.IndexBytes) / narrow
			r.Claim += "; a wide key grows every secondary index"
			r.Agrees = r.Agrees && ratio >= widerIndex
			r.Why += fmt.Sprintf("; secondary index %.2f× the BIGINT tables'", ratio)
		}
		if !r.Judged {
			r.Agrees = false
			r.Why += "; too small for a verdict"
		}
	}
}

// noVerdict says why rows got no verdict and how many rows per table would give every table one
// (rounded up to 100,000); "" when every row was judged.
func noVerdict(rows []BTreeRow, keys []btreeKey, rowsPerTable int) string {
	narrow := narrowIndexBytes(rows, keys)
	unjudged, need := 0, 0.0
	for i, r := range rows {
		if r.Error != "" || r.Judged {
			continue
		}
		unjudged++
		for _, b := range verdictSizes(r, keys[i], narrow) {
			if b > 0 {
				need = max(need, float64(rowsPerTable)*minVerdictBytes/b)
			}
		}
	}
	if unjudged == 0 {
		return ""
	}
	const step = 100_000
	rowsNeeded := (int(math.Ceil(need)) + step - 1) / step * step
	return fmt.Sprintf("this run is too small for a verdict on %d of %d tables: a verdict needs every index it compares to be at least %d MiB, "+
		"and InnoDB grows an index by whole extents of 1 MiB, so the size of a smaller one is mostly the allocation's step, not the inserts'. "+
		"Run with --rows %s or more for a verdict on every table.", unjudged, len(rows), minVerdictBytes>>20, count(rowsNeeded))
}
