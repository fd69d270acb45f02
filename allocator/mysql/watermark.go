package mysql

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/multi"
)

// The restored-backup guard. A ticket server restored from an old backup comes back with counters that
// went back in time, and would issue again every ID since the backup. To catch it, the pair writes each
// server's highest counter seen (its high-water mark) into the other servers' ticketd_watermarks
// table — in the background every WatermarkInterval and on Close — and when a server starts or comes
// back, its counters are compared with what its peers (and this process) recorded. A server below a
// mark is fenced: it serves nothing until `ticketd repair` advances it.

// marks are the highest counter values seen on one server, per namespace. Safe for concurrent use.
type marks struct {
	mu   sync.Mutex
	high map[string]int64
	// written[peer][ns] is the value last written into that peer's table.
	written map[*server]map[string]int64
}

func (m *marks) observe(ns string, end int64) {
	m.mu.Lock()
	if m.high == nil {
		m.high = map[string]int64{}
	}
	if end > m.high[ns] {
		m.high[ns] = end
	}
	m.mu.Unlock()
}

func (m *marks) get(ns string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.high[ns]
}

// pending returns the marks the peer has not received yet.
func (m *marks) pending(peer *server) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for ns, v := range m.high {
		if m.written[peer][ns] < v {
			out[ns] = v
		}
	}
	return out
}

func (m *marks) wrote(peer *server, ns string, v int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.written == nil {
		m.written = map[*server]map[string]int64{}
	}
	if m.written[peer] == nil {
		m.written[peer] = map[string]int64{}
	}
	if v > m.written[peer][ns] {
		m.written[peer][ns] = v
	}
}

// writeWatermarks writes every server's unwritten marks into each usable peer.
func (p *Pair) writeWatermarks(ctx context.Context) error {
	var errs []error
	for _, s := range p.set.All() {
		v, ok := s.vars()
		if !ok {
			continue
		}
		for _, peer := range p.set.All() {
			if peer == s || !peer.Usable() {
				continue
			}
			for ns, high := range s.marks.pending(peer) {
				_, err := peer.ctl.ExecContext(ctx, `INSERT INTO ticketd_watermarks (namespace, peer_offset, high_water, updated_us)
					VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE high_water = GREATEST(high_water, VALUES(high_water)), updated_us = VALUES(updated_us)`,
					ns, v.offset, high, p.cfg.now().UnixMicro())
				if err != nil {
					errs = append(errs, fmt.Errorf("water mark of %s on %s: %w", s.Name(), peer.Name(), err))
					break
				}
				s.marks.wrote(peer, ns, high)
			}
		}
	}
	return errors.Join(errs...)
}

// recordWatermarks writes the marks in the background, every WatermarkInterval.
func (p *Pair) recordWatermarks() {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.AttemptTimeout)
	defer cancel()
	if err := p.writeWatermarks(ctx); err != nil {
		p.cfg.Logger.Warn("could not record high-water marks", "err", err)
	}
}

// peerMarks returns, per namespace, the highest mark any reachable peer (or this process) holds for s.
// A peer that is fenced itself still holds valid marks about s, so every inspected peer is asked; only
// an error from a peer in rotation is an error.
func (p *Pair) peerMarks(ctx context.Context, s *server) (map[string]watermark, error) {
	v, _ := s.vars()
	out := map[string]watermark{}
	s.marks.mu.Lock()
	for ns, h := range s.marks.high {
		out[ns] = watermark{value: h, holder: "this ticketd process"}
	}
	s.marks.mu.Unlock()
	for _, peer := range p.set.All() {
		if peer == s || !peer.inspected() {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, p.cfg.AttemptTimeout)
		rows, err := peer.ctl.QueryContext(qctx, "SELECT namespace, high_water FROM ticketd_watermarks WHERE peer_offset = ?", v.offset)
		if err != nil {
			cancel()
			if isNoSuchTable(err) || !peer.Usable() {
				continue
			}
			return nil, fmt.Errorf("reading water marks on %s: %w", peer.Name(), err)
		}
		for rows.Next() {
			var ns string
			var h int64
			if err := rows.Scan(&ns, &h); err != nil {
				rows.Close()
				cancel()
				return nil, err
			}
			if h > out[ns].value {
				out[ns] = watermark{value: h, holder: peer.Name()}
			}
		}
		rows.Close()
		cancel()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type watermark struct {
	value  int64
	holder string
}

// checkFence compares s's counters with the marks its peers hold. A counter below a mark fences s.
func (p *Pair) checkFence(ctx context.Context, s *server) error {
	marks, err := p.peerMarks(ctx, s)
	if err != nil {
		return err
	}
	rows, err := s.readRows(ctx)
	if err != nil {
		return err
	}
	var fenced []string
	var details []string
	have := map[string]bool{}
	for _, r := range rows {
		have[r.ns.Name] = true
		if w := marks[r.ns.Name]; r.next < w.value {
			fenced = append(fenced, r.ns.Name)
			details = append(details, fmt.Sprintf("namespace %q counter %d is below %d recorded by %s", r.ns.Name, r.next, w.value, w.holder))
		}
	}
	for ns, w := range marks {
		if !have[ns] && w.value > 0 {
			fenced = append(fenced, ns)
			details = append(details, fmt.Sprintf("namespace %q has no row but %s recorded counter %d", ns, w.holder, w.value))
		}
	}
	sort.Strings(fenced)
	sort.Strings(details)
	s.mu.Lock()
	s.fenced = fenced
	s.mu.Unlock()
	if len(fenced) == 0 {
		return nil
	}
	err = fmt.Errorf("%w: %s looks restored from an old backup (%s); it serves nothing until an operator checks it and runs: ticketd repair %s --server %s",
		allocator.ErrFenced, s.Name(), strings.Join(details, "; "), fenced[0], s.Name())
	p.cfg.Logger.Error("ticket server fenced", "server", s.Name(), "namespaces", fenced, "err", err)
	return err
}

// RepairResult says what Repair changed.
type RepairResult struct {
	Server    string
	Namespace string
	Before    int64 // the counter before
	Watermark int64 // the highest mark found for it
	After     int64 // the counter now
}

// Repair advances a fenced server's counter for a namespace past the highest water mark its peers hold,
// plus margin (IDs that may have been issued after the last mark was written; 0 means 100 ×
// max_block_size × step), then checks the server again. Run it only after checking why the server went
// back — it makes the server serve again.
func (p *Pair) Repair(ctx context.Context, namespace, serverName string, margin int64) (RepairResult, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return RepairResult{}, err
	}
	var s *server
	for _, c := range p.set.All() {
		if c.Name() == serverName {
			s = c
		}
	}
	if s == nil {
		return RepairResult{}, fmt.Errorf("no ticket server named %q; the servers are %s", serverName, p.names())
	}
	if !s.inspected() {
		if err := s.inspect(ctx); err != nil {
			return RepairResult{}, err
		}
	}
	marks, err := p.peerMarks(ctx, s)
	if err != nil {
		return RepairResult{}, err
	}
	res := RepairResult{Server: s.Name(), Namespace: namespace, Watermark: marks[namespace].value}
	row, err := s.readRow(ctx, namespace)
	switch {
	case errors.Is(err, errRowMissing):
		latest, rerr := p.set.Latest(ctx, namespace)
		if rerr != nil {
			return res, rerr
		}
		if err := s.ensureRow(ctx, latest.ns, 0); err != nil {
			return res, err
		}
		if row, err = s.readRow(ctx, namespace); err != nil {
			return res, err
		}
	case err != nil:
		return res, err
	}
	res.Before = row.next
	if margin <= 0 {
		margin = 100 * row.ns.MaxBlockSize * row.step
	}
	v, _ := s.vars()
	target, ok := multi.FirstAtLeast(max(res.Watermark, row.next)+margin, v.increment, v.offset)
	if !ok {
		return res, fmt.Errorf("%w: repairing %q on %s would pass MaxInt64", allocator.ErrExhausted, namespace, s.Name())
	}
	if _, err := s.ctl.ExecContext(ctx, "UPDATE ticketd_namespaces SET next_id = GREATEST(next_id, ?) WHERE name = ?", target, namespace); err != nil {
		return res, err
	}
	if row, err = s.readRow(ctx, namespace); err != nil {
		return res, err
	}
	res.After = row.next
	s.marks.observe(namespace, row.next)
	if !s.Usable() {
		if err := s.Revive(ctx); err != nil && !errors.Is(err, allocator.ErrFenced) {
			return res, err
		}
	}
	return res, nil
}
