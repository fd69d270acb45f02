package sim

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ticketd/ticketd/schema"
)

// The simulated ticket server answers the statements the MySQL backend sends, as MariaDB would: each
// by its text (whitespace folded) and its arguments, against the tables of one server's data. Nothing
// else is understood: a statement it does not know fails loudly, so a new statement in the backend is
// seen here at once.

// data is one server's tables.
type data struct {
	rows  map[rowKey]*row
	marks map[peerKey]*mark
	rates map[peerKey]*rate
	// reports are, for each process of an older release, the updated_us of its last lease-rate
	// report this server holds (see seenOlder): the simulation's own record, not a table.
	reports map[string]int64
}

type rowKey struct {
	name   string
	offset int64
}

type peerKey struct {
	ns     string
	offset int64
}

type row struct {
	name                          string
	next, step, offset, start     int64
	block, maxBlock, ttlMS, maxID int64
	createdUS, updatedUS, maxIDUS int64
}

type mark struct {
	high, updatedUS int64
	identity        string
}

type rate struct {
	peak, updatedUS, writtenUS, leased, windowLeased, windowUS, fleetPeak, intervalUS int64
}

func newData() *data {
	return &data{rows: map[rowKey]*row{}, marks: map[peerKey]*mark{}, rates: map[peerKey]*rate{}, reports: map[string]int64{}}
}

func (d *data) clone() *data {
	c := newData()
	for k, v := range d.rows {
		r := *v
		c.rows[k] = &r
	}
	for k, v := range d.marks {
		m := *v
		c.marks[k] = &m
	}
	for k, v := range d.rates {
		r := *v
		c.rates[k] = &r
	}
	maps.Copy(c.reports, d.reports)
	return c
}

// sortedRows returns the rows that pass keep, by name and offset.
func (d *data) sortedRows(keep func(*row) bool) []*row {
	var out []*row
	for _, r := range d.rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *row) int {
		if c := cmp.Compare(a.name, b.name); c != 0 {
			return c
		}
		return cmp.Compare(a.offset, b.offset)
	})
	return out
}

// errNetwork is what a statement or a connection meets on a link that is cut, or whose reply is lost.
var errNetwork = errors.New("sim: i/o timeout")

// connector is one party's way to one server.
type connector struct {
	w    *World
	from string
	srv  *Server
	link string // the key of the link between them: from/server
}

func (c connector) Connect(context.Context) (driver.Conn, error) {
	if err := c.w.reach(c.link, c.srv); err != nil {
		return nil, err
	}
	c.srv.connections++
	return &conn{connector: c, epoch: c.srv.epoch}, nil
}

// boot starts the server anew at now: a new run, which breaks every connection.
func (s *Server) boot(now time.Time) {
	s.epoch++
	s.bootAt, s.connections = now, 0
}

func (c connector) Driver() driver.Driver { return simDriver{} }

type simDriver struct{}

func (simDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("sim: open through a connector")
}

// conn is one connection: it breaks when its server restarts (a new epoch).
type conn struct {
	connector
	epoch int
}

func (c *conn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("sim: prepared statements are not simulated")
}
func (c *conn) Close() error { return nil }
func (c *conn) Begin() (driver.Tx, error) {
	return nil, errors.New("sim: transactions are not simulated")
}
func (c *conn) IsValid() bool { return c.srv.up && c.epoch == c.srv.epoch }
func (c *conn) ResetSession(context.Context) error {
	if !c.IsValid() {
		return driver.ErrBadConn
	}
	return nil
}

func (c *conn) Ping(context.Context) error {
	if c.epoch != c.srv.epoch {
		return driver.ErrBadConn
	}
	return c.w.reach(c.link, c.srv)
}

// begin checks the way to the server before a statement runs.
func (c *conn) begin() error {
	if c.srv.up && c.epoch != c.srv.epoch {
		return driver.ErrBadConn
	}
	return c.w.reach(c.link, c.srv)
}

func (c *conn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	c.w.wrote(c.from)
	res, err := c.srv.exec(c.w, c.from, parse(query).q, values(args))
	if err != nil {
		return nil, err
	}
	if c.w.replyLost(c.link) {
		return nil, errNetwork
	}
	return res, nil
}

func (c *conn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	rs, err := c.srv.query(c.w, parse(query), values(args))
	if err != nil {
		return nil, err
	}
	if c.w.replyLost(c.link) {
		return nil, errNetwork
	}
	return rs, nil
}

// statements caches what the simulated server takes from each statement text: the text with its
// whitespace folded, and the lists it names (columns, variables). The backend sends a few dozen texts,
// millions of times; each is parsed once. The lists are shared: nothing may change them.
var statements sync.Map

type stmt struct {
	q string // the text, whitespace folded
	// cols are the columns (or the variables) a SELECT names, for the SELECTs whose answer follows
	// them; where is what follows the table of a SELECT of namespace rows.
	cols      []string
	rowSelect bool
	where     string
}

func parse(query string) *stmt {
	if st, ok := statements.Load(query); ok {
		return st.(*stmt)
	}
	q := strings.Join(strings.Fields(query), " ")
	st := &stmt{q: q}
	const table = " FROM ticketd_namespaces"
	switch {
	case strings.HasPrefix(q, "SELECT @@GLOBAL.auto_increment_increment"):
		st.cols = strings.Split(strings.TrimPrefix(q, "SELECT "), ", ")
	case strings.HasPrefix(q, "SELECT ") && strings.Contains(q, table):
		from := strings.Index(q, table)
		st.rowSelect, st.cols, st.where = true, strings.Split(strings.TrimPrefix(q[:from], "SELECT "), ", "), q[from+len(table):]
	case strings.HasPrefix(q, "SELECT namespace, high_water"):
		st.cols = strings.Split(strings.TrimPrefix(q[:strings.Index(q, " FROM")], "SELECT "), ", ")
	}
	statements.Store(query, st)
	return st
}

func values(args []driver.NamedValue) []driver.Value {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		out[i] = a.Value
	}
	return out
}

func i64(v driver.Value) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	case bool:
		if x {
			return 1
		}
		return 0
	}
	panic(fmt.Sprintf("sim: not an integer: %T %v", v, v))
}

func str(v driver.Value) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	panic(fmt.Sprintf("sim: not a string: %T %v", v, v))
}

type result struct{ id, n int64 }

func (r result) LastInsertId() (int64, error) { return r.id, nil }
func (r result) RowsAffected() (int64, error) { return r.n, nil }

type rows struct {
	cols []string
	vals [][]driver.Value
	i    int
}

func (r *rows) Columns() []string { return r.cols }
func (r *rows) Close() error      { return nil }
func (r *rows) Next(dest []driver.Value) error {
	if r.i >= len(r.vals) {
		return io.EOF
	}
	copy(dest, r.vals[r.i])
	r.i++
	return nil
}

// column is a row's value of a column a SELECT names (” is the empty string).
func (r *row) column(c string) driver.Value {
	switch c {
	case "name":
		return r.name
	case "next_id":
		return r.next
	case "step":
		return r.step
	case "id_offset":
		return r.offset
	case "start_id":
		return r.start
	case "block_size":
		return r.block
	case "max_block_size":
		return r.maxBlock
	case "lease_ttl_ms":
		return r.ttlMS
	case "max_id":
		return r.maxID
	case "updated_us":
		return r.updatedUS
	case "max_id_us":
		return r.maxIDUS
	case "''":
		return ""
	}
	panic("sim: column not simulated: " + c)
}

// selectRows answers a SELECT of namespace rows: its columns, and its WHERE and ORDER BY, of which
// the backend sends four.
func (s *Server) selectRows(w *World, st *stmt, a []driver.Value) driver.Rows {
	cols := st.cols
	var keep func(*row) bool
	var newest bool
	switch st.where {
	case " ORDER BY name, id_offset":
		keep = func(*row) bool { return true }
	case " WHERE id_offset = ? ORDER BY name":
		keep = func(r *row) bool { return r.offset == i64(a[0]) }
	case " WHERE id_offset = ?": // a peer's copies of a server's rows: read as water marks
		keep = func(r *row) bool { return !w.Off.PeerMarks && r.offset == i64(a[0]) }
	case " WHERE name = ? AND id_offset = ?":
		keep = func(r *row) bool { return r.name == str(a[0]) && r.offset == i64(a[1]) }
	case " WHERE name = ? ORDER BY updated_us DESC LIMIT 1":
		keep, newest = func(r *row) bool { return r.name == str(a[0]) }, true
	default:
		panic("sim: query not simulated: " + st.q)
	}
	rs := s.data.sortedRows(keep)
	if newest {
		slices.SortStableFunc(rs, func(a, b *row) int { return cmp.Compare(b.updatedUS, a.updatedUS) })
		rs = rs[:min(1, len(rs))]
	}
	out := &rows{cols: cols}
	for _, r := range rs {
		v := make([]driver.Value, len(cols))
		for i, c := range cols {
			v[i] = r.column(c)
		}
		out.vals = append(out.vals, v)
	}
	return out
}

// query answers a SELECT or SHOW.
func (s *Server) query(w *World, st *stmt, a []driver.Value) (driver.Rows, error) {
	d, q := s.data, st.q
	switch {
	case strings.HasPrefix(q, "SELECT @@GLOBAL.auto_increment_increment"):
		names := st.cols
		v := make([]driver.Value, len(names))
		for i, n := range names {
			v[i] = s.variable(w, n)
		}
		return &rows{cols: names, vals: [][]driver.Value{v}}, nil
	case q == "SHOW GLOBAL STATUS WHERE Variable_name IN ('Uptime', 'Connections')":
		up := int64(w.now.Sub(s.bootAt) / time.Second)
		return &rows{cols: []string{"Variable_name", "Value"}, vals: [][]driver.Value{
			{"Uptime", strconv.FormatInt(up, 10)}, {"Connections", strconv.FormatInt(s.connections, 10)}}}, nil
	case strings.HasPrefix(q, "SHOW GLOBAL VARIABLES"), strings.HasPrefix(q, "SHOW GLOBAL STATUS"):
		return &rows{cols: []string{"Variable_name", "Value"}}, nil
	case q == "SELECT @@GLOBAL.server_id":
		return &rows{cols: []string{"server_id"}, vals: [][]driver.Value{{s.identity(w)}}}, nil
	case q == "SHOW REPLICA STATUS", q == "SHOW SLAVE STATUS":
		return &rows{}, nil
	case q == "SELECT MAX(version) FROM ticketd_schema_migrations":
		return &rows{cols: []string{"v"}, vals: [][]driver.Value{{int64(schema.Latest())}}}, nil
	case st.rowSelect:
		return s.selectRows(w, st, a), nil
	case strings.HasPrefix(q, "SELECT namespace, high_water"):
		cols := st.cols
		out := &rows{cols: cols}
		if w.Off.PeerMarks {
			return out, nil
		}
		off := i64(a[0])
		var keys []peerKey
		for k := range d.marks {
			if k.offset == off {
				keys = append(keys, k)
			}
		}
		for _, k := range sortKeys(keys) {
			m := d.marks[k]
			v := []driver.Value{k.ns, m.high, m.identity}
			out.vals = append(out.vals, v[:len(cols)])
		}
		return out, nil
	case strings.HasPrefix(q, "SELECT peer_offset, fleet_peak_per_s, peak_per_s, interval_us FROM ticketd_lease_rates WHERE namespace = ?"):
		out := &rows{cols: []string{"o", "f", "p", "i"}}
		if w.Off.PeerMarks {
			return out, nil
		}
		for _, k := range sortedRateKeys(d.rates) {
			if r := d.rates[k]; k.ns == str(a[0]) {
				out.vals = append(out.vals, []driver.Value{k.offset, r.fleetPeak, r.peak, r.intervalUS})
			}
		}
		return out, nil
	case strings.HasPrefix(q, "SELECT fleet_peak_per_s, peak_per_s, interval_us FROM ticketd_lease_rates"):
		out := &rows{cols: []string{"f", "p", "i"}}
		if r, ok := d.rates[peerKey{str(a[0]), i64(a[1])}]; ok && !w.Off.PeerMarks {
			out.vals = append(out.vals, []driver.Value{r.fleetPeak, r.peak, r.intervalUS})
		}
		return out, nil
	case strings.HasPrefix(q, "SELECT peak_per_s FROM ticketd_lease_rates"):
		out := &rows{cols: []string{"p"}}
		if r, ok := d.rates[peerKey{str(a[0]), i64(a[1])}]; ok && !w.Off.PeerMarks {
			out.vals = append(out.vals, []driver.Value{r.peak})
		}
		return out, nil
	case strings.HasPrefix(q, "SELECT COUNT(*), MAX(updated_us) FROM ticketd_lease_rates"):
		var n int64
		var last driver.Value
		for _, k := range keysOf(d.rates) {
			if r := d.rates[k]; k.ns == str(a[0]) && r.updatedUS > i64(a[1]) && !w.Off.OlderRelease {
				n++
				last = max(i64(orZero(last)), r.updatedUS)
			}
		}
		return &rows{cols: []string{"n", "m"}, vals: [][]driver.Value{{n, last}}}, nil
	}
	panic("sim: query not simulated: " + q)
}

// variable is the value of a global variable as a SELECT of @@GLOBAL.name reads it.
func (s *Server) variable(w *World, n string) driver.Value {
	switch n {
	case "@@GLOBAL.auto_increment_increment":
		return s.step
	case "@@GLOBAL.auto_increment_offset":
		return s.offset
	case "@@GLOBAL.innodb_flush_log_at_trx_commit", "@@GLOBAL.log_bin", "@@GLOBAL.sync_binlog":
		return int64(1)
	case "@@GLOBAL.version":
		return "10.11.6-MariaDB-sim"
	case "@@GLOBAL.read_only":
		return int64(0)
	case "@@GLOBAL.server_id":
		return s.identity(w)
	}
	panic("sim: variable not simulated: " + n)
}

func orZero(v driver.Value) driver.Value {
	if v == nil {
		return int64(0)
	}
	return v
}

// keysOf returns a table's keys in order.
func keysOf[V any](m map[peerKey]V) []peerKey { return sortKeys(slices.Collect(maps.Keys(m))) }

// sortKeys sorts keys by namespace, then offset.
func sortKeys(keys []peerKey) []peerKey {
	slices.SortFunc(keys, func(a, b peerKey) int {
		if c := cmp.Compare(a.ns, b.ns); c != 0 {
			return c
		}
		return cmp.Compare(a.offset, b.offset)
	})
	return keys
}

// exec answers an INSERT or UPDATE.
func (s *Server) exec(w *World, from, q string, a []driver.Value) (driver.Result, error) {
	d := s.data
	nowUS := w.now.UnixMicro()
	switch {
	case strings.HasPrefix(q, "UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(GREATEST(next_id, ?) + ? * ?)"):
		// first, total, step; name, step, offset, floor, step, residue, largest, first, total, step,
		// first, [known max_id,] total, step
		first, total, step := i64(a[0]), i64(a[1]), i64(a[2])
		r := d.rows[rowKey{str(a[3]), i64(a[5])}]
		known := int64(math.MaxInt64)
		if len(a) == 17 && !w.Off.CeilingBound {
			known = i64(a[14])
		}
		if r == nil || r.step != i64(a[4]) || (!w.Off.Floors && r.next < i64(a[6])) || r.next%i64(a[7]) != i64(a[8]) ||
			i64(a[9]) > r.maxBlock {
			return result{}, nil
		}
		base := max(r.next, first)
		if base > math.MaxInt64-total*step || base > min(r.maxID, known)-(total-1)*step {
			return result{}, nil
		}
		r.next = base + total*step
		return result{id: r.next, n: 1}, nil
	case strings.HasPrefix(q, "UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(?)"):
		// end; name, step, offset, counter read, floor, max_id read, largest
		r := d.rows[rowKey{str(a[1]), i64(a[3])}]
		if r == nil || r.step != i64(a[2]) || r.next != i64(a[4]) || (!w.Off.Floors && r.next < i64(a[5])) || r.maxID != i64(a[6]) || i64(a[7]) > r.maxBlock {
			return result{}, nil
		}
		r.next = i64(a[0])
		return result{id: r.next, n: 1}, nil
	case strings.HasPrefix(q, "UPDATE ticketd_namespaces SET block_size = IF("):
		return s.updateRow(w, q, a)
	case q == "UPDATE ticketd_namespaces SET next_id = GREATEST(next_id, ?) WHERE name = ? AND step = ? AND id_offset = ?":
		r := d.rows[rowKey{str(a[1]), i64(a[3])}]
		if r == nil || r.step != i64(a[2]) || r.next >= i64(a[0]) {
			return result{}, nil
		}
		r.next = i64(a[0])
		return result{n: 1}, nil
	case strings.HasPrefix(q, "UPDATE ticketd_namespaces SET next_id = GREATEST(next_id, ?), max_id = IF("):
		// a repair: counter, then the newest ceiling by its time (ceiling_us, ceiling_us, max_id,
		// max_id, ceiling_us); name, step, offset
		r := d.rows[rowKey{str(a[6]), i64(a[8])}]
		if r == nil || r.step != i64(a[7]) {
			return result{}, nil
		}
		before := *r
		r.next = max(r.next, i64(a[0]))
		if us, m := i64(a[1]), i64(a[3]); us > r.maxIDUS || (us == r.maxIDUS && m < r.maxID) {
			r.maxID = m
		}
		r.maxIDUS = max(r.maxIDUS, i64(a[5]))
		if *r == before {
			return result{}, nil
		}
		return result{n: 1}, nil
	case strings.HasPrefix(q, "INSERT IGNORE INTO ticketd_namespaces"):
		cols := strings.Split(q[strings.Index(q, "(")+1:strings.Index(q, ")")], ", ")
		r := &row{}
		for i, c := range cols {
			switch c {
			case "name":
				r.name = str(a[i])
			case "next_id":
				r.next = i64(a[i])
			case "step":
				r.step = i64(a[i])
			case "id_offset":
				r.offset = i64(a[i])
			case "start_id":
				r.start = i64(a[i])
			case "block_size":
				r.block = i64(a[i])
			case "max_block_size":
				r.maxBlock = i64(a[i])
			case "lease_ttl_ms":
				r.ttlMS = i64(a[i])
			case "max_id":
				r.maxID = i64(a[i])
			case "created_us":
				r.createdUS = i64(a[i])
			case "updated_us":
				r.updatedUS = i64(a[i])
			case "max_id_us":
				r.maxIDUS = i64(a[i])
			default:
				panic("sim: column not simulated: " + c)
			}
		}
		k := rowKey{r.name, r.offset}
		if d.rows[k] != nil {
			return result{}, nil
		}
		d.rows[k] = r
		return result{n: 1}, nil
	case strings.HasPrefix(q, "INSERT INTO ticketd_watermarks") && strings.Contains(q, ") AS mark ON DUPLICATE KEY UPDATE"):
		// rows of namespace, offset, mark, now, identity
		var n int64
		for ; len(a) >= 5; a = a[5:] {
			k := peerKey{str(a[0]), i64(a[1])}
			m := d.marks[k]
			if m == nil {
				d.marks[k] = &mark{high: i64(a[2]), updatedUS: i64(a[3]), identity: str(a[4])}
				n++
				continue
			}
			if id := str(a[4]); id != "" && (i64(a[2]) > m.high || m.identity == "") {
				m.identity = id
			}
			m.high, m.updatedUS = max(m.high, i64(a[2])), i64(a[3])
			n += 2
		}
		return result{n: n}, nil
	case strings.HasPrefix(q, "INSERT INTO ticketd_watermarks"):
		k := peerKey{str(a[0]), i64(a[1])}
		m := d.marks[k]
		if len(a) == 10 { // with the server's identity
			if m == nil {
				d.marks[k] = &mark{high: i64(a[2]), updatedUS: i64(a[3]), identity: str(a[4])}
				return result{n: 1}, nil
			}
			if id := str(a[5]); id != "" && (i64(a[6]) > m.high || m.identity == "") {
				m.identity = str(a[7])
			}
			m.high, m.updatedUS = max(m.high, i64(a[8])), i64(a[9])
			return result{n: 2}, nil
		}
		// namespace, offset, mark, now; mark; now
		if m == nil {
			d.marks[k] = &mark{high: i64(a[2]), updatedUS: i64(a[3])}
			return result{n: 1}, nil
		}
		m.high, m.updatedUS = max(m.high, i64(a[len(a)-2])), i64(a[len(a)-1])
		return result{n: 2}, nil
	case strings.HasPrefix(q, "INSERT INTO ticketd_lease_rates"):
		return s.pace(from, q, a, nowUS)
	}
	panic("sim: statement not simulated: " + q)
}

// updateRow answers the namespace change (see mysql's updateRow): assignments left to right, each on
// the values the ones before it left.
func (s *Server) updateRow(w *World, q string, a []driver.Value) (driver.Result, error) {
	if !strings.Contains(q, "max_id_us") {
		return s.updateRowBefore6(w, a)
	}
	r := s.data.rows[rowKey{str(a[14]), i64(a[16])}]
	if r == nil || r.step != i64(a[15]) || (!w.Off.Floors && r.next < i64(a[17])) {
		return result{}, nil
	}
	if !(r.next-r.step <= i64(a[18]) || r.maxID <= i64(a[19]) || i64(a[20]) < r.maxIDUS || (i64(a[21]) == r.maxIDUS && i64(a[22]) >= r.maxID)) {
		return result{}, nil
	}
	before := *r
	r.takeSizes(a)
	if i64(a[6]) > r.maxIDUS || (i64(a[7]) == r.maxIDUS && i64(a[8]) < r.maxID) {
		r.maxID = i64(a[9])
	}
	r.maxIDUS = max(r.maxIDUS, i64(a[10]))
	r.start = max(r.start, i64(a[11]))
	r.next = max(r.next, i64(a[12]))
	r.updatedUS = max(r.updatedUS, i64(a[13]))
	if *r == before {
		return result{}, nil
	}
	return result{n: 1}, nil
}

// takeSizes sets the block sizes and the lease TTL that the first six parameters of a namespace change
// carry (each its time, then its value), where that time is newer than the row's settings.
func (r *row) takeSizes(a []driver.Value) {
	if i64(a[0]) > r.updatedUS {
		r.block = i64(a[1])
	}
	if i64(a[2]) > r.updatedUS {
		r.maxBlock = i64(a[3])
	}
	if i64(a[4]) > r.updatedUS {
		r.ttlMS = i64(a[5])
	}
}

// updateRowBefore6 answers the namespace change of the releases before schema 6: the ceiling by the
// settings' time, and a lowering refused in the statement when the row issued above it.
func (s *Server) updateRowBefore6(w *World, a []driver.Value) (driver.Result, error) {
	// now, block, now, max block, now, ttl, now, max_id, start, floor, now; name, step, offset, mark,
	// lowered, lowered
	r := s.data.rows[rowKey{str(a[11]), i64(a[13])}]
	if r == nil || r.step != i64(a[12]) || (!w.Off.Floors && r.next < i64(a[14])) || !(i64(a[15]) == 0 || r.next-r.step <= i64(a[16])) {
		return result{}, nil
	}
	before := *r
	r.takeSizes(a)
	if i64(a[6]) > r.updatedUS {
		r.maxID = i64(a[7])
	}
	r.start = max(r.start, i64(a[8]))
	r.next = max(r.next, i64(a[9]))
	r.updatedUS = max(r.updatedUS, i64(a[10]))
	if *r == before {
		return result{}, nil
	}
	return result{n: 1}, nil
}

// pace answers the write of a process's lease rate (see mysql's paceSQL), on the server's clock.
func (s *Server) pace(from, q string, a []driver.Value, nowUS int64) (driver.Result, error) {
	k := peerKey{str(a[0]), i64(a[1])}
	r := s.data.rates[k]
	if !strings.Contains(q, "fleet_peak_per_s") { // an older release: the process's own rate alone
		s.data.reports[from] = max(s.data.reports[from], i64(a[3]))
		if r == nil {
			s.data.rates[k] = &rate{peak: i64(a[2]), updatedUS: i64(a[3])}
			return result{n: 1}, nil
		}
		r.peak, r.updatedUS = max(r.peak, i64(a[len(a)-2])), i64(a[len(a)-1])
		return result{n: 2}, nil
	}
	if strings.Contains(q, ") AS rate ON DUPLICATE KEY UPDATE") {
		// rows of namespace, offset, rate, now, span, span, interval; then window, window, window
		win := a[len(a)-3:]
		var n int64
		for a = a[:len(a)-3]; len(a) >= 7; a = a[7:] {
			res, _ := s.paceRow(a[:7], []driver.Value{win[0], a[4], win[1], a[4], win[2], a[4], a[2], a[3], a[6]}, nowUS)
			m, _ := res.RowsAffected()
			n += m
		}
		return result{n: n}, nil
	}
	return s.paceRow(a[:7], a[7:], nowUS)
}

// paceRow answers one row of the lease rates' write: the inserted row's values (namespace, offset,
// rate, now, span, span, interval), then those of the update (window, span, window, span, window,
// span, rate, now, interval).
func (s *Server) paceRow(a, u []driver.Value, nowUS int64) (driver.Result, error) {
	k := peerKey{str(a[0]), i64(a[1])}
	r := s.data.rates[k]
	if r == nil {
		s.data.rates[k] = &rate{peak: i64(a[2]), writtenUS: i64(a[3]), leased: i64(a[4]), windowLeased: i64(a[5]),
			windowUS: nowUS, intervalUS: i64(a[6])}
		return result{n: 1}, nil
	}
	if nowUS-r.windowUS >= i64(u[0]) && nowUS > r.windowUS {
		perS := int64(math.Round(float64(r.leased+i64(u[1])-r.windowLeased) * 1e6 / float64(nowUS-r.windowUS)))
		r.fleetPeak = max(r.fleetPeak, perS)
	}
	if nowUS-r.windowUS >= i64(u[2]) {
		r.windowLeased = r.leased + i64(u[3])
	}
	if nowUS-r.windowUS >= i64(u[4]) {
		r.windowUS = nowUS
	}
	r.leased += i64(u[5])
	r.peak = max(r.peak, i64(u[6]))
	r.writtenUS = i64(u[7])
	r.intervalUS = max(r.intervalUS, i64(u[8]))
	return result{n: 2}, nil
}

// sortedRateKeys are the keys of the lease rates in a fixed order: a schedule replays the same.
func sortedRateKeys(m map[peerKey]*rate) []peerKey {
	keys := make([]peerKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y peerKey) int {
		if c := strings.Compare(x.ns, y.ns); c != 0 {
			return c
		}
		return cmp.Compare(x.offset, y.offset)
	})
	return keys
}
