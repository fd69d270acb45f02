package mysql

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
	"github.com/ticketd/ticketd/schema"
)

// Diagnosis is what Diagnose found on every configured ticket server.
type Diagnosis struct {
	Servers    []ServerDiagnosis
	Namespaces []NamespaceDiagnosis
	// Problems would make ticketd refuse a server, fence it, or risk duplicates; each says how to fix it.
	Problems []string
	// Notes are worth knowing but harmless.
	Notes []string
}

// OK reports whether no problem was found.
func (d Diagnosis) OK() bool { return len(d.Problems) == 0 }

// ServerDiagnosis is one server's settings.
type ServerDiagnosis struct {
	Name          string
	Reachable     bool
	Error         string
	Version       string
	Increment     int64
	Offset        int64
	FlushAtCommit int64
	LogBin        bool
	SyncBinlog    int64
	Schema        int // highest migration applied; 0 when none
	// Replication says how the server replicates (a Galera cluster, a source), empty when it does not.
	Replication string
}

// NamespaceDiagnosis is one namespace's row on one server.
type NamespaceDiagnosis struct {
	Namespace string
	Server    string
	Present   bool
	Step      int64
	Offset    int64
	Next      int64
	// Watermark is the highest counter a peer recorded for this server (0 if none), and Holder the peer.
	Watermark int64
	Holder    string
	Status    string // "ok", or what is wrong
}

// Diagnose checks every server in cfg without refusing any: reachability, version, auto_increment
// settings (pairwise), durability settings, schema version, each namespace's row and step/offset, and
// each counter against its peers' water marks. Only a configuration error (a bad DSN) is an error.
func Diagnose(ctx context.Context, cfg Config) (Diagnosis, error) {
	p, err := build(cfg)
	if err != nil {
		return Diagnosis{}, err
	}
	defer p.closeDBs()
	var d Diagnosis
	problem := func(format string, a ...any) { d.Problems = append(d.Problems, fmt.Sprintf(format, a...)) }

	d.Servers = make([]ServerDiagnosis, len(p.set.All()))
	var wg sync.WaitGroup
	for i, s := range p.set.All() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Servers[i] = p.diagnoseServer(ctx, s)
		}()
	}
	wg.Wait()

	var list []namedVars
	for i, s := range p.set.All() {
		sd := d.Servers[i]
		if !sd.Reachable {
			problem("%s is unreachable (%s): start it or fix its DSN; ticketd serves from the others meanwhile", s.Name(), sd.Error)
			continue
		}
		v, _ := s.vars()
		for _, e := range v.problems(s.Name()) {
			problem("%s", unwrapMisconfigured(e))
		}
		if err := s.replication().usable(s.Name(), v); err != nil {
			problem("%s; wait until the node has caught up, or find why it cannot", err)
		}
		list = append(list, namedVars{s.Name(), v})
		if sd.Schema < schema.Latest() {
			problem("%s has schema version %d, this ticketd needs %d: run `ticketd migrate`", s.Name(), sd.Schema, schema.Latest())
		} else if err := s.tryMarkWrites(ctx); err != nil {
			problem("ticketd cannot write the water marks of its peers on %s (%v): it serves, but the restored-state guard forgets what each process saw when it stops; grant INSERT and UPDATE on ticketd_watermarks and ticketd_lease_rates to ticketd's user, or free the disk",
				s.Name(), err)
		}
	}
	for _, e := range crossProblems(list, len(p.set.All())) {
		problem("%s", unwrapMisconfigured(e))
	}

	// Namespace rows and water marks, for every server that answered.
	rows := map[*server]map[string]rowSettings{}
	names := map[string]bool{}
	for i, s := range p.set.All() {
		if !d.Servers[i].Reachable || d.Servers[i].Schema == 0 {
			continue
		}
		rs, err := s.readRows(ctx)
		if err != nil {
			problem("reading namespaces on %s: %v", s.Name(), err)
			continue
		}
		v, _ := s.vars()
		replicated := s.replication().replicates(v)
		rows[s] = map[string]rowSettings{}
		for _, r := range rs {
			names[r.ns.Name] = true
			// Its own rows, by offset; on a server that replicates its peers, theirs are copies. Any
			// other row is kept, so that a step/offset mismatch shows.
			if r.offset == v.offset || !replicated || r.step != v.increment {
				if _, mine := rows[s][r.ns.Name]; !mine || r.offset == v.offset {
					rows[s][r.ns.Name] = r
				}
			}
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, s := range p.set.All() {
		mine, ok := rows[s]
		if !ok {
			continue
		}
		v, _ := s.vars()
		marks := p.peerMarks(ctx, s, v.offset)
		for _, name := range sorted {
			nd := NamespaceDiagnosis{Namespace: name, Server: s.Name(), Watermark: marks[name].Value, Holder: marks[name].Holder, Status: "ok"}
			r, present := mine[name]
			switch {
			case !present:
				nd.Status = "no row yet"
				d.Notes = append(d.Notes, fmt.Sprintf("namespace %q has no row on %s (created while it was away); ticketd creates it when the server is next checked", name, s.Name()))
				if nd.Watermark > 0 {
					nd.Status = "fenced: row missing below water mark"
					problem("namespace %q has no row on %s but %s recorded counter %d: the server looks restored from an old backup; check it, then run `ticketd repair %s --server %s`",
						name, s.Name(), nd.Holder, nd.Watermark, name, s.Name())
				}
			default:
				nd.Present, nd.Step, nd.Offset, nd.Next = true, r.step, r.offset, r.next
				if r.step != v.increment || r.offset != v.offset {
					nd.Status = "step/offset mismatch"
					problem("namespace %q on %s was created with step %d offset %d but the server runs with auto_increment_increment %d offset %d: restore the server's settings",
						name, s.Name(), r.step, r.offset, v.increment, v.offset)
				} else if w := marks[name]; w.Replaced(v.identity) {
					nd.Status = "fenced: another server in its place"
					problem("%s; if a replica was promoted in its place, check how far behind it was, then run `ticketd repair %s --server %s`",
						failover.IdentityChanged(name, w, v.identity), name, s.Name())
				} else if r.next < nd.Watermark {
					nd.Status = "fenced: counter below water mark"
					problem("namespace %q on %s: counter %d is below %d recorded by %s: the server looks restored from an old backup; check it, then run `ticketd repair %s --server %s`",
						name, s.Name(), r.next, nd.Watermark, nd.Holder, name, s.Name())
				}
			}
			d.Namespaces = append(d.Namespaces, nd)
		}
	}
	return d, nil
}

func (p *Store) diagnoseServer(ctx context.Context, s *server) ServerDiagnosis {
	sd := ServerDiagnosis{Name: s.Name()}
	qctx, cancel := p.cfg.Runtime.Timeout(ctx, p.cfg.AttemptTimeout)
	defer cancel()
	v, err := readVars(qctx, s.ctl)
	if err != nil {
		sd.Error = err.Error()
		return sd
	}
	r, err := readReplication(qctx, s.ctl, v)
	if err != nil {
		sd.Error = err.Error()
		return sd
	}
	s.mu.Lock()
	s.seen, s.haveSeen, s.repl = v, true, r
	s.mu.Unlock()
	sd.Reachable, sd.Version, sd.Increment, sd.Offset, sd.Replication = true, v.version, v.increment, v.offset, r.String()
	sd.FlushAtCommit, sd.LogBin, sd.SyncBinlog = v.flushAtCommit, v.logBin, v.syncBinlog
	var version *int
	if err := s.ctl.QueryRowContext(qctx, "SELECT MAX(version) FROM ticketd_schema_migrations").Scan(&version); err == nil && version != nil {
		sd.Schema = *version
	}
	return sd
}

// tryMarkWrites writes a water mark and a lease rate of a namespace that cannot exist, as the guard
// writes them, and rolls both back: what fails here fails for every process's marks.
func (s *server) tryMarkWrites(ctx context.Context) error {
	tx, err := s.ctl.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // rolled back on purpose
	// Not a namespace name: no row of a real namespace is touched.
	const probe = "~doctor"
	if _, err := tx.ExecContext(ctx, batchSQL(markSQL, markRows, 1), probe, 0, 0, 0, ""); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, batchSQL(paceSQL, paceRows, 1), probe, 0, 0, 0, 0, 0, 1, 1, 1, 1)
	return err
}

// unwrapMisconfigured drops the sentinel's prefix from a check's message: the doctor's table says it.
func unwrapMisconfigured(err error) string {
	return strings.TrimPrefix(err.Error(), allocator.ErrMisconfigured.Error()+": ")
}
