package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/mono"
)

// Change is a namespace change as a Set hands it to each server.
type Change[R Record[R]] struct {
	// Namespace is the settings, validated and with defaults. At an update, Start is the namespace's
	// own, from Current.
	Namespace allocator.Namespace
	// Current is the latest copy of the settings before an update; the zero R at create.
	Current R
	// Advance is the Start an update asked for, or 0: counters rise to it, never fall.
	Advance int64
	// UpdatedUS is the time of the change in microseconds, stored with the settings. A change sets
	// every setting, the ceiling too: it is also the time the ceiling was set (Record.CeilingUS).
	UpdatedUS int64
	// Lowered is the new max_id when an update lowers it, or 0: a server whose counter already passed
	// it refuses the change (ErrInvalidSettings) in the statement that would write it.
	Lowered int64
}

// States reads each server's counter of each named namespace.
type States func(ctx context.Context, names []string) map[string][]allocator.ServerState

// CreateNamespace creates ns (with defaults, validated) on every server that reach lets through;
// create makes it on one server and says whether it was new there. A server left out gets the
// namespace when it comes back. ErrExists when every server that answered had it.
func (set *Set[S, R]) CreateNamespace(ctx context.Context, ns allocator.Namespace, reach func(context.Context, S) bool,
	create func(context.Context, S, Change[R]) (created bool, err error)) (allocator.Namespace, error) {
	ns, ctx, cancel, err := set.begin(ctx, ns)
	if err != nil {
		return allocator.Namespace{}, err
	}
	defer cancel()
	if ns.MaxID < allocator.DefaultMaxID {
		if err := set.checkCeiling(ctx, ns.Name); err != nil {
			return allocator.Namespace{}, err
		}
	}
	c := Change[R]{Namespace: ns, UpdatedUS: set.cfg.Now().UnixMicro()}
	created, existed := 0, 0
	var errs []error
	for _, s := range set.servers {
		if !reach(ctx, s) {
			continue
		}
		ok, err := create(ctx, s, c)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
			if set.cfg.IsFault(err) {
				s.MarkDown(err)
			}
		case ok:
			created++
		default:
			existed++
		}
	}
	set.Forget(ns.Name)
	switch {
	case created > 0:
		_, _ = set.Latest(ctx, ns.Name) // remember the settings just written
		return ns, nil
	case existed > 0:
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrExists, ns.Name)
	}
	for _, e := range errs {
		if !set.cfg.IsFault(e) {
			return allocator.Namespace{}, e
		}
	}
	return allocator.Namespace{}, fmt.Errorf("%w: creating %q: %w", allocator.ErrUnavailable, ns.Name, set.why(errs))
}

// UpdateNamespace replaces a namespace's settings (zero fields mean their defaults) on every usable
// server; update changes them on one. A Start above the namespace's own is handed on as Advance, and
// is the Start returned. ErrUnavailable when no server took the change; a server that missed it takes
// it when it is next checked.
//
// A lower max_id is in force only once every server holds it, since each server's statement keeps its
// leases below its own copy: it needs every server to answer (states reads their counters) and none to
// have issued above it (ErrInvalidSettings naming the highest issued otherwise); each server checks
// again as it takes the change (Lowered). When a server does not take it, the servers that did are put
// back to the ceiling before, and the error says which server refused and why, and what to do.
func (set *Set[S, R]) UpdateNamespace(ctx context.Context, ns allocator.Namespace, states States,
	update func(context.Context, S, Change[R]) error) (allocator.Namespace, error) {
	advance := ns.Start
	ns, ctx, cancel, err := set.begin(ctx, ns)
	if err != nil {
		return allocator.Namespace{}, err
	}
	defer cancel()
	current, err := set.Latest(ctx, ns.Name)
	if err != nil {
		return allocator.Namespace{}, err
	}
	ns.Start = current.Namespace().Start
	if ns.MaxID < ns.Start {
		return allocator.Namespace{}, fmt.Errorf("%w: max_id %d must be at least start %d", allocator.ErrInvalidSettings, ns.MaxID, ns.Start)
	}
	// A change is newer than the settings it replaces even when this process's clock is behind the one
	// that wrote them: the newest copy wins on every server.
	c := Change[R]{Namespace: ns, Current: current, Advance: advance,
		UpdatedUS: max(set.cfg.Now().UnixMicro(), current.UpdatedUS()+1, current.CeilingUS()+1)}
	// A lowering is a change below the ceiling any server holds, not only below the newest: after a
	// lowering that failed but stayed on some servers, the others still hold the old ceiling and may
	// have issued up to it, and a change to a max_id between the two lowers theirs.
	// A server whose copy cannot be read may hold any ceiling the others held before, such as the one
	// a lowering left behind on them while it failed on that server: every change that keeps a
	// ceiling may lower that server's, so it needs every copy read.
	highest := current.Namespace().WithDefaults().MaxID
	unread := set.Names()
	for _, s := range set.readable(ctx) {
		r, ok, err := s.ReadRecord(ctx, ns.Name)
		if err != nil {
			continue
		}
		unread = slices.DeleteFunc(unread, func(n string) bool { return n == s.Name() })
		if ok {
			highest = max(highest, r.Namespace().WithDefaults().MaxID)
		}
	}
	if len(unread) > 0 && ns.MaxID < NoCeiling {
		return allocator.Namespace{}, fmt.Errorf("%w: changing the settings of %q, which has a max_id, needs every %s to answer, and %s did not: its copy may hold a higher max_id than the others hold (a lowering it did not take may have stayed on them), and this change would lower that one without it; run the change again once it answers",
			allocator.ErrUnavailable, ns.Name, set.cfg.Noun, strings.Join(unread, ", "))
	}
	if ns.MaxID < highest {
		if err := set.checkCeiling(ctx, ns.Name); err != nil {
			return allocator.Namespace{}, err
		}
		if err := set.checkLowering(ctx, ns, states); err != nil {
			return allocator.Namespace{}, err
		}
		c.Lowered = ns.MaxID
	}
	var took []S
	var errs, skipped []error // of the servers tried, and of those out of rotation
	var missed []string
	for _, s := range set.servers {
		if !s.Usable() {
			missed = append(missed, s.Name())
			skipped = append(skipped, fmt.Errorf("%s: out of rotation: %s", s.Name(), s.Health().Error))
			continue
		}
		if set.cfg.BeforeChange != nil {
			set.cfg.BeforeChange(s.Name())
		}
		if err := update(ctx, s, c); err != nil {
			missed = append(missed, s.Name())
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
			if set.cfg.IsFault(err) {
				s.MarkDown(err)
			}
			continue
		}
		took = append(took, s)
	}
	set.Forget(ns.Name)
	if c.Lowered > 0 && len(missed) > 0 {
		return allocator.Namespace{}, set.undoLowering(ctx, c, took, missed, append(errs, skipped...), update)
	}
	if len(took) == 0 {
		return allocator.Namespace{}, fmt.Errorf("%w: updating %q: %w", allocator.ErrUnavailable, ns.Name, set.why(errs))
	}
	if len(missed) > 0 {
		set.cfg.Logger.Warn("namespace change not taken by every "+set.cfg.Noun+"; each takes it when it is next checked",
			"namespace", ns.Name, "missed", missed, "err", errors.Join(append(errs, skipped...)...))
	}
	_, _ = set.Latest(ctx, ns.Name) // remember the settings just written, for servers that missed them
	if advance > ns.Start {
		ns.Start = advance
	}
	return ns, nil
}

// undoLowering puts the servers that took a lowered ceiling back to the settings before, since some
// server did not take it, and returns the error that says which, why, and what to do.
func (set *Set[S, R]) undoLowering(ctx context.Context, c Change[R], took []S, missed []string, errs []error,
	update func(context.Context, S, Change[R]) error) error {
	name := c.Namespace.Name
	before := c.Current.Namespace().WithDefaults()
	undo := Change[R]{Namespace: before, Current: c.Current, UpdatedUS: c.UpdatedUS + 1}
	var putBack, stuck []string
	var undoErrs []error
	for _, s := range took {
		if err := update(ctx, s, undo); err != nil {
			stuck = append(stuck, s.Name())
			undoErrs = append(undoErrs, fmt.Errorf("%s: %w", s.Name(), err))
			continue
		}
		putBack = append(putBack, s.Name())
	}
	set.Forget(name)
	_, _ = set.Latest(ctx, name)
	cause := allocator.ErrUnavailable
	todo := "run the update again once every " + set.cfg.Noun + " answers"
	for _, e := range errs {
		if errors.Is(e, allocator.ErrInvalidSettings) {
			cause = allocator.ErrInvalidSettings
			todo = "IDs above it were issued meanwhile: choose a max_id at or above the highest ID issued (ticketd namespace get shows each counter) and run the update again"
		}
	}
	what := "nothing changed"
	switch {
	case len(stuck) > 0:
		what = fmt.Sprintf("%s still hold max_id %d (putting them back failed: %v): a process that reads their settings leases at or below it on every server",
			strings.Join(stuck, ", "), c.Lowered, errors.Join(undoErrs...))
		todo += ", with the max_id you want in force"
	case len(putBack) > 0:
		what = fmt.Sprintf("%s, which took it, were put back to max_id %d", strings.Join(putBack, ", "), before.MaxID)
	}
	if c.Advance > before.Start && len(took) > 0 {
		what += fmt.Sprintf(" (the start advanced to %d stays: counters only rise)", c.Advance)
	}
	return fmt.Errorf("%w: max_id of %q was not lowered to %d: a lower ceiling is in force only once every %s holds it, and %s did not take it (%w); %s; %s",
		cause, name, c.Lowered, set.cfg.Noun, strings.Join(missed, ", "), errors.Join(errs...), what, todo)
}

// checkCeiling asks the backend whether a ceiling may be set now (see Config.CheckCeiling).
func (set *Set[S, R]) checkCeiling(ctx context.Context, name string) error {
	if set.cfg.CheckCeiling == nil {
		return nil
	}
	return set.cfg.CheckCeiling(ctx, name)
}

// checkLowering refuses a max_id below what any server issued, and a lower max_id while a server does
// not answer (what it issued is unknown).
func (set *Set[S, R]) checkLowering(ctx context.Context, ns allocator.Namespace, states States) error {
	cur := allocator.Namespace{Name: ns.Name, Servers: states(ctx, []string{ns.Name})[ns.Name]}
	var down []error
	for _, st := range cur.Servers {
		if !st.Healthy {
			down = append(down, fmt.Errorf("%s: %s", st.Server, st.Error))
		}
	}
	if len(down) > 0 || len(cur.Servers) != len(set.servers) {
		return fmt.Errorf("%w: lowering max_id of %q needs every %s to answer, to know the highest ID issued: %w",
			allocator.ErrUnavailable, ns.Name, set.cfg.Noun, errors.Join(down...))
	}
	return allocator.CheckLowering(ns.Name, ns.MaxID, cur.HighestIssued())
}

// Namespace returns a namespace's latest settings, read from the servers (see ReadSettings), with
// each server's state.
func (set *Set[S, R]) Namespace(ctx context.Context, name string, states States) (allocator.Namespace, error) {
	ctx, cancel := set.cfg.Runtime.Timeout(ctx, set.cfg.Timeout)
	defer cancel()
	ns, err := set.ReadSettings(ctx, name)
	if err != nil {
		return allocator.Namespace{}, err
	}
	ns.Servers = states(ctx, []string{name})[name]
	return ns, nil
}

// ReadSettings returns a namespace's latest settings as Latest reads them, without any server's state,
// and keeps them as the copy leases use (see Settings): one read serves both.
func (set *Set[S, R]) ReadSettings(ctx context.Context, name string) (allocator.Namespace, error) {
	return set.readSettings(ctx, name, func(ctx context.Context) (R, error) {
		now := set.cfg.Now()
		r, err := set.Latest(ctx, name)
		if err == nil {
			set.keep(name, r, now)
		}
		return r, err
	})
}

// SharedSettings returns a namespace's settings without any server's state: the copy leases use (see
// Settings), read alone the first time and then with every other namespace's once it is SettingsTTL
// old, so that a caller refreshing many namespaces' settings (the segment cache) costs the servers a
// read per SettingsTTL, not one per namespace. The copy may be up to SettingsTTL old (and older while
// no server answers): ReadSettings is for a caller that must see a change at once.
func (set *Set[S, R]) SharedSettings(ctx context.Context, name string) (allocator.Namespace, error) {
	return set.readSettings(ctx, name, func(ctx context.Context) (R, error) { return set.Settings(ctx, name) })
}

// readSettings checks the name and that the set is open, and reads with read under the set's timeout.
func (set *Set[S, R]) readSettings(ctx context.Context, name string, read func(context.Context) (R, error)) (allocator.Namespace, error) {
	if err := allocator.ValidateName(name); err != nil {
		return allocator.Namespace{}, err
	}
	if set.closed.Load() {
		return allocator.Namespace{}, allocator.ErrClosed
	}
	ctx, cancel := set.cfg.Runtime.Timeout(ctx, set.cfg.Timeout)
	defer cancel()
	r, err := read(ctx)
	if err != nil {
		return allocator.Namespace{}, err
	}
	return r.Namespace(), nil
}

// Namespaces lists the namespaces known to any usable server, sorted by name, each with its latest
// settings and each server's state.
func (set *Set[S, R]) Namespaces(ctx context.Context, states States) ([]allocator.Namespace, error) {
	if set.closed.Load() {
		return nil, allocator.ErrClosed
	}
	ctx, cancel := set.cfg.Runtime.Timeout(ctx, set.cfg.Timeout)
	defer cancel()
	latest := make(map[string]R, set.knownCount())
	answered := 0
	var errs []error
	for _, s := range set.readable(ctx) {
		// A server that fails part way leaves the rows it sent merged: each is a copy it held.
		if err := eachRecord(ctx, s, func(r R) { KeepLatest(latest, r) }); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
			continue
		}
		answered++
	}
	if answered == 0 {
		return nil, fmt.Errorf("%w: listing namespaces: %w", allocator.ErrUnavailable, set.why(errs))
	}
	set.settingsMu.Lock()
	for _, r := range latest {
		set.rememberLocked(r)
	}
	for _, e := range set.settings {
		KeepLatest(latest, e.rec)
	}
	set.settingsMu.Unlock()
	names := make([]string, 0, len(latest))
	for name := range latest {
		names = append(names, name)
	}
	sort.Strings(names)
	byName := states(ctx, names)
	out := make([]allocator.Namespace, 0, len(names))
	for _, name := range names {
		ns := latest[name].Namespace()
		ns.Servers = byName[name]
		out = append(out, ns)
	}
	return out, nil
}

// KeepLatest adds r to latest (by namespace name), merged with the copy latest holds (see Merge).
func KeepLatest[R Record[R]](latest map[string]R, r R) {
	name := r.Namespace().Name
	if cur, ok := latest[name]; ok {
		r = Merge(cur, r)
	}
	latest[name] = r
}

// slowSettings is how long a lease waits for a refresh of settings it holds a copy of. A refresh that
// takes longer (a server that takes requests and answers none) goes on in the background, and the
// lease uses the copy it has, as when no server answers.
const slowSettings = 50 * time.Millisecond

// Settings returns a namespace's settings as Latest reads them, cached for SettingsTTL. When no server
// answers, settings read before are good enough; so they are while a refresh is slow (see
// slowSettings): the refresh goes on in the background, and leases go on with the last copy.
//
// A namespace read for the first time is read alone. Expired copies are refreshed together: one
// refresh at a time reads every namespace's settings from each server (see refreshAll) and renews
// every cached copy, so that the statements a process sends for its settings are a few per SettingsTTL
// and server, however many namespaces it leases from.
func (set *Set[S, R]) Settings(ctx context.Context, name string) (R, error) {
	now := set.cfg.Now()
	set.settingsMu.Lock()
	c := set.settings[name]
	age, ok := c.cached(now)
	if ok && age >= 0 && age < set.cfg.SettingsTTL { // a copy from the future (the clock went back) is old
		set.settingsMu.Unlock()
		return c.rec, nil
	}
	if !ok {
		set.settingsMu.Unlock()
		return set.refresh(ctx, name, now)
	}
	done := set.refreshing
	start := done == nil && !set.closed.Load()
	if start {
		done = make(chan struct{})
		set.refreshing = done
		set.wg.Add(1)
	}
	set.settingsMu.Unlock()
	if start { // after the unlock: a runtime may run it at once, in this goroutine
		set.cfg.Runtime.Go(func() {
			defer set.wg.Done()
			rctx, cancel := set.cfg.Runtime.Timeout(set.bg, set.cfg.Timeout)
			set.refreshAll(rctx, now)
			cancel()
			set.settingsMu.Lock()
			set.refreshing = nil
			set.settingsMu.Unlock()
			close(done)
		})
	}
	t := time.NewTimer(slowSettings)
	defer t.Stop()
	select {
	case <-done:
		set.settingsMu.Lock()
		if n := set.settings[name]; n.fetched != 0 {
			c = n
		}
		set.settingsMu.Unlock()
	case <-t.C:
	case <-ctx.Done():
	}
	return c.rec, nil
}

// refreshAll reads every namespace's settings from each readable server, one read per server, and
// renews every cached copy as read at now (merged with what this process knows, as Latest does). When
// no server answers, the cached copies stay as they are, expired: the next lease asks again.
func (set *Set[S, R]) refreshAll(ctx context.Context, now time.Time) {
	latest := make(map[string]R, set.knownCount())
	answered := 0
	for _, s := range set.readable(ctx) {
		if eachRecord(ctx, s, func(r R) { KeepLatest(latest, r) }) == nil {
			answered++
		}
	}
	if answered == 0 {
		return
	}
	set.settingsMu.Lock()
	defer set.settingsMu.Unlock()
	for name, c := range set.settings {
		if c.fetched == 0 {
			continue // not cached for leases
		}
		if r, ok := latest[name]; ok {
			c.rec = set.rememberLocked(r)
		} // else the servers that answered missed it (or lost it); this process knows it
		c.fetched = mono.Nanos(now)
		set.settings[name] = c
	}
}

// refresh reads a namespace's settings with Latest and caches them as read at now. When no server
// answers, the copy cached before, if any, is returned.
func (set *Set[S, R]) refresh(ctx context.Context, name string, now time.Time) (R, error) {
	rec, err := set.Latest(ctx, name)
	if err != nil {
		set.settingsMu.Lock()
		c := set.settings[name]
		set.settingsMu.Unlock()
		if c.fetched != 0 && !errors.Is(err, allocator.ErrNotFound) {
			return c.rec, nil // servers unreachable: the last known settings are good enough
		}
		var zero R
		return zero, err
	}
	set.keep(name, rec, now)
	return rec, nil
}

// keep caches rec as a namespace's settings read at now, for leases (merged with the newest copy
// known: one remembered meanwhile is newer).
func (set *Set[S, R]) keep(name string, rec R, now time.Time) {
	set.settingsMu.Lock()
	if e, ok := set.settings[name]; ok {
		rec = Merge(e.rec, rec)
	}
	set.settings[name] = settingsEntry[R]{rec: rec, fetched: mono.Nanos(now)}
	set.settingsMu.Unlock()
}

// Forget drops a namespace's cached settings, after a change; the newest copy stays known.
func (set *Set[S, R]) Forget(name string) {
	set.settingsMu.Lock()
	if e, ok := set.settings[name]; ok {
		e.fetched = 0
		set.settings[name] = e
	}
	set.settingsMu.Unlock()
}

// rememberLocked merges r into the newest known copy of its namespace (see Merge), also the copy
// cached for leases, and returns it. settingsMu must be held.
func (set *Set[S, R]) rememberLocked(r R) R {
	name := r.Namespace().Name
	e, ok := set.settings[name]
	if ok {
		r = Merge(e.rec, r)
	}
	e.rec = r
	set.settings[name] = e
	return r
}

// knownCount is how many namespaces this process knows the settings of: the size of a listing.
func (set *Set[S, R]) knownCount() int {
	set.settingsMu.Lock()
	defer set.settingsMu.Unlock()
	return len(set.settings)
}

// Known returns the newest copy of every namespace's settings this process has read or written, for a
// server that comes back to catch up with, even when the servers holding a change are away.
func (set *Set[S, R]) Known() []R {
	set.settingsMu.Lock()
	defer set.settingsMu.Unlock()
	out := make([]R, 0, len(set.settings))
	for _, e := range set.settings {
		out = append(out, e.rec)
	}
	return out
}

// Latest reads a namespace's settings from every usable server and returns the copy updated last, this
// process's own knowledge (see Known) included: ErrNotFound when neither the servers that answered nor
// this process know it, ErrUnavailable when none answered.
func (set *Set[S, R]) Latest(ctx context.Context, name string) (R, error) {
	var best R
	found := false
	var errs []error
	answered := 0
	for _, s := range set.readable(ctx) {
		r, ok, err := s.ReadRecord(ctx, name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		case !ok:
			answered++
		default:
			answered++
			if found {
				r = Merge(best, r)
			}
			best, found = r, true
		}
	}
	set.settingsMu.Lock()
	if found {
		best = set.rememberLocked(best)
	} else if k, ok := set.settings[name]; ok && answered > 0 {
		best, found = k.rec, true // the servers that answered missed it (or lost it); this process knows it
	}
	set.settingsMu.Unlock()
	switch {
	case found:
		return best, nil
	case answered == 0:
		return best, fmt.Errorf("%w: reading namespace %q: %w", allocator.ErrUnavailable, name, set.why(errs))
	}
	return best, fmt.Errorf("%w: %q", allocator.ErrNotFound, name)
}

// readable returns the servers that reads go to: the usable ones and the fenced ones, and with
// ReviveToRead, when none is usable, those whose backoff has passed and that pass their checks again.
func (set *Set[S, R]) readable(ctx context.Context) []S {
	var out []S
	usable := 0
	for _, s := range set.servers {
		switch {
		case s.Usable():
			out = append(out, s)
			usable++
		case s.Health().Fenced:
			// A fenced server went back in time, but what it holds of the settings is merged by
			// time like any copy, and a change made since it went back (a start advance while the
			// others were down) may be on it alone.
			out = append(out, s)
		}
	}
	if usable > 0 || !set.cfg.ReviveToRead {
		return out
	}
	for _, s := range set.servers {
		if !slices.Contains(out, s) && s.Due(set.cfg.Now()) && s.Revive(ctx) == nil {
			out = append(out, s)
		}
	}
	return out
}

// begin starts a namespace change: ns with its defaults, validated; the set still open; the call under
// the set's timeout.
func (set *Set[S, R]) begin(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, context.Context, context.CancelFunc, error) {
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return ns, ctx, nil, err
	}
	if set.closed.Load() {
		return ns, ctx, nil, allocator.ErrClosed
	}
	ctx, cancel := set.cfg.Runtime.Timeout(ctx, set.cfg.Timeout)
	return ns, ctx, cancel, nil
}
