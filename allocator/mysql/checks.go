package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/ticketd/ticketd/allocator"
)

// readVars reads the settings that decide which IDs a server issues and whether they survive a crash:
// the server's global values, which a change on the running server moves at once (a session keeps the
// auto_increment values of the moment it connected).
func readVars(ctx context.Context, db *sql.DB) (serverVars, error) {
	var v serverVars
	var logBin, readOnly, serverID int64
	err := db.QueryRowContext(ctx, `SELECT @@GLOBAL.auto_increment_increment, @@GLOBAL.auto_increment_offset,
		@@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.log_bin, @@GLOBAL.sync_binlog, @@GLOBAL.version, @@GLOBAL.read_only,
		@@GLOBAL.server_id`).
		Scan(&v.increment, &v.offset, &v.flushAtCommit, &logBin, &v.syncBinlog, &v.version, &readOnly, &serverID)
	if err != nil {
		return v, err
	}
	v.logBin, v.readOnly = logBin == 1, readOnly == 1
	v.identity = fmt.Sprintf("server_id %d", serverID)
	// Galera's settings exist only on servers built with it: read them by name, which MySQL answers
	// with no row.
	wsrep, err := nameValues(ctx, db, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_auto_increment_control')")
	if err != nil {
		return v, err
	}
	v.galera = strings.EqualFold(wsrep["wsrep_on"], "ON")
	v.autoIncrementControl = strings.EqualFold(wsrep["wsrep_auto_increment_control"], "ON")
	return v, nil
}

// replication is how a server replicates, as far as ticketd can see: the Galera cluster it belongs to,
// or the source it replicates from. It is state, not settings: a node's state and a cluster's size
// change while it serves, and only decide whether the server may serve now.
type replication struct {
	// Galera: the cluster's state UUID, size and members, this node's state (Synced, Donor/Desynced,
	// Joined…) and the cluster component's (Primary or not).
	clusterUUID, localState, clusterStatus, members string
	clusterSize                                     int64
	// Classic replication: the source this server replicates from, and whether its threads run.
	source            string
	ioRunning, sqlRun bool
	// serverID is the server's @@server_id, and sourceID the source's (0 when not known).
	serverID, sourceID int64
}

// readReplication reads a server's replication state. A server that may not read its replica status
// (no REPLICATION CLIENT privilege) is taken for one that replicates from nowhere.
func readReplication(ctx context.Context, db *sql.DB, v serverVars) (replication, error) {
	var r replication
	if v.galera {
		st, err := nameValues(ctx, db, `SHOW GLOBAL STATUS WHERE Variable_name IN
			('wsrep_cluster_state_uuid', 'wsrep_cluster_size', 'wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_incoming_addresses')`)
		if err != nil {
			return r, err
		}
		r.clusterUUID, r.localState, r.clusterStatus = st["wsrep_cluster_state_uuid"], st["wsrep_local_state_comment"], st["wsrep_cluster_status"]
		r.members = st["wsrep_incoming_addresses"]
		r.clusterSize, _ = strconv.ParseInt(st["wsrep_cluster_size"], 10, 64)
	}
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.server_id").Scan(&r.serverID); err != nil {
		return r, err
	}
	rows, err := db.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		rows, err = db.QueryContext(ctx, "SHOW SLAVE STATUS") // before MySQL 8.0.22 and MariaDB 10.5.1
	}
	if err != nil {
		return r, nil
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || !rows.Next() {
		return r, nil
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return r, err
	}
	col := map[string]string{}
	for i, c := range cols {
		col[c] = vals[i].String
	}
	pick := func(names ...string) string {
		for _, n := range names {
			if v, ok := col[n]; ok {
				return v
			}
		}
		return ""
	}
	if host := pick("Source_Host", "Master_Host"); host != "" {
		r.source = host + ":" + pick("Source_Port", "Master_Port")
		r.ioRunning = strings.EqualFold(pick("Replica_IO_Running", "Slave_IO_Running"), "Yes")
		r.sqlRun = strings.EqualFold(pick("Replica_SQL_Running", "Slave_SQL_Running"), "Yes")
		r.sourceID, _ = strconv.ParseInt(pick("Source_Server_Id", "Master_Server_Id"), 10, 64)
	}
	return r, nil
}

// nameValues runs a SHOW … WHERE Variable_name IN (…) and returns its rows by name.
func nameValues(ctx context.Context, db *sql.DB, query string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		out[strings.ToLower(name)] = value
	}
	return out, rows.Err()
}

// replicates reports whether the server holds rows it does not write: copies of its peers' rows.
func (r replication) replicates(v serverVars) bool { return v.galera || r.source != "" }

// String describes the replication for people: doctor, the namespace API, the status page.
func (r replication) String() string {
	var parts []string
	if r.clusterUUID != "" {
		parts = append(parts, fmt.Sprintf("Galera cluster %s (%d nodes: %s; this node %s, component %s)", short(r.clusterUUID), r.clusterSize, r.members, r.localState, r.clusterStatus))
	}
	if r.source != "" {
		parts = append(parts, fmt.Sprintf("replica of %s, server_id %d (I/O thread %s, SQL thread %s); this server's server_id %d",
			r.source, r.sourceID, yesNo(r.ioRunning), yesNo(r.sqlRun), r.serverID))
	}
	return strings.Join(parts, "; ")
}

// usable says why a server may not serve now although its settings are right: a Galera node that is
// not Synced (a donor, a joiner) or not in the cluster's primary component.
func (r replication) usable(name string, v serverVars) error {
	if !v.galera {
		return nil
	}
	if r.localState != "Synced" || r.clusterStatus != "Primary" {
		return fmt.Errorf("%s is a Galera node in state %s (cluster component %s), not Synced in the primary component: it is not used until it is",
			name, r.localState, r.clusterStatus)
	}
	return nil
}

func short(uuid string) string {
	if len(uuid) > 8 {
		return uuid[:8]
	}
	return uuid
}

func yesNo(b bool) string {
	if b {
		return "running"
	}
	return "stopped"
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
	if v.readOnly {
		errs = append(errs, fmt.Errorf("%w: %s is read-only (read_only=ON; a replica?): a ticket server takes writes; point ticketd at the server that does, or set read_only=OFF",
			allocator.ErrMisconfigured, name))
	}
	if v.galera && v.autoIncrementControl {
		errs = append(errs, fmt.Errorf("%w: %s is a Galera node with wsrep_auto_increment_control=ON: Galera then sets auto_increment_increment and offset from the cluster's size, and changes them when a node comes or goes; set wsrep_auto_increment_control=OFF, auto_increment_increment to a fixed value with room to grow (at least the number of nodes; nodes + 1 leaves room for one more) and a distinct auto_increment_offset on each node",
			allocator.ErrMisconfigured, name))
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
