package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// errMissing means the instance lacks a namespace (settings or counter) that another instance has.
var errMissing = errors.New("redis: namespace missing on this instance")

// errNotChecked means a lease reached an instance whose checks have not passed yet.
var errNotChecked = errors.New("redis: instance not checked yet")

// record is a namespace's settings as an instance stores them.
type record struct {
	ns allocator.Namespace
	// floor is the highest Start an update advanced the counters to; an instance that missed the
	// update starts there. Zero when no update advanced them.
	floor     int64
	updatedUS int64
	ceilingUS int64 // when max_id was set; 0 when written by a ticketd that did not record it
}

// change is the record a namespace change writes: its settings, made at updatedUS, the ceiling too.
func change(ns allocator.Namespace, floor, updatedUS int64) record {
	return record{ns: ns, floor: floor, updatedUS: updatedUS, ceilingUS: updatedUS}
}

// parseRecord reads a settings hash.
func parseRecord(name string, m map[string]string) (record, error) {
	var errs []error
	num := func(field string, optional bool) int64 {
		v, ok := m[field]
		if !ok && optional {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("field %s: %q", field, v))
		}
		return n
	}
	r := record{ns: allocator.Namespace{Name: name}}
	r.ns.Start = num("start", false)
	r.ns.BlockSize = num("block_size", false)
	r.ns.MaxBlockSize = num("max_block_size", false)
	r.ns.LeaseTTL = time.Duration(num("lease_ttl_ms", false)) * time.Millisecond
	if r.ns.MaxID = num("max_id", true); r.ns.MaxID == 0 {
		r.ns.MaxID = allocator.DefaultMaxID // made before namespaces had a ceiling
	}
	r.floor = num("floor", true)
	r.updatedUS = num("updated_us", true)
	r.ceilingUS = num("max_id_us", true)
	if err := errors.Join(errs...); err != nil {
		return record{}, fmt.Errorf("%w: the settings of namespace %q were changed outside ticketd: %w", allocator.ErrMisconfigured, name, err)
	}
	return r, nil
}

// instance is one Redis ticket server and what the store knows of it. Safe for concurrent use.
type instance struct {
	*failover.Member // in rotation or not, and why: the failover state every backend keeps alike

	client *goredis.Client
	offset int64
	store  *Store

	// checked holds the id the instance's offset claim was proven under: a lease sends it, and the
	// lease script refuses an instance that no longer has it (wiped, replaced). Nil until checked.
	checked atomic.Pointer[string]
	marks   failover.Floors // the highest counters seen here, by this process and in the peers' marks
	// local is, per namespace, the highest count of its leases this instance was seen to keep in its
	// local leases hash, by this process and in the peers' water marks (see leaseScript).
	local  failover.Floors
	stored failover.MarkWrites // whether this process's marks of the other instances reach this one

	mu     sync.Mutex
	warned bool // the volatile warning was logged
	// fence holds the namespaces below a water mark, or every one when the instance lost its data.
	fence failover.Fence
}

// Health reports the instance's state with its stride and offset, and whether it is fenced.
func (in *instance) Health() allocator.ServerHealth {
	h := in.Member.Health()
	h.Step, h.Offset = in.store.cfg.Stride, in.offset
	in.fence.Report(&h)
	h.Marks = in.stored.Problem()
	return h
}

// reachable reports whether the instance answers: in rotation, or out of it because it is fenced.
func (in *instance) reachable() bool { return in.Usable() || in.fence.Fenced() }

// Revive checks a down instance again and puts it back in rotation.
func (in *instance) Revive(ctx context.Context) error {
	return in.ReviveWith(ctx, in.check)
}

// fenceBelow fences the instance for a namespace whose counter, read as counter, is below its floor.
func (in *instance) fenceBelow(ns, counter string, floor failover.Mark) error {
	return in.store.fence(in, []string{ns}, []string{fmt.Sprintf("namespace %q counter %s is below %d seen by %s", ns, counter, floor.Value, floor.Holder)})
}

// fenceCopy fences the instance for a namespace of which it counts fewer leases (count) than were
// seen there (local): it is not the instance that issued them, but a copy of it — a replica promoted in
// its place — or it went back in time.
func (in *instance) fenceCopy(ns, count string, local failover.Mark) error {
	return in.store.fence(in, []string{ns}, []string{copyReason(ns, count, local)})
}

func copyReason(ns, count string, local failover.Mark) string {
	return fmt.Sprintf("namespace %q: it counts %s leases of its own, but %s saw %d: it is a copy of the instance that issued them (a replica promoted in its place) or went back in time",
		ns, count, local.Holder, local.Value)
}

// check runs every check an instance must pass before it serves: it keeps acknowledged writes, its
// offset claim is proven exclusive across the set, no counter is below a water mark, and it caught up
// with the namespaces and settings it missed. Only then do leases go to it, under the id its claim
// was proven with. A misconfiguration is ErrMisconfigured, lost data or a counter gone back
// ErrFenced; an instance that does not answer returns its connection error.
func (in *instance) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 4*in.store.cfg.AttemptTimeout)
	defer cancel()
	err := in.checkDurability(ctx)
	var id string
	if err == nil {
		id, err = in.claim(ctx)
	}
	// The counters are compared with the floors before anything is written: catching up raises a
	// counter to the namespace's start, which on an instance restored from a copy older than a start
	// advance would lift it over what it issued from that start, past the floors that show it went back.
	if err == nil {
		err = in.store.checkFence(ctx, in)
	}
	if err == nil {
		err = in.catchUp(ctx)
	}
	if err != nil {
		in.NoteError(err)
		return err
	}
	in.checked.Store(&id)
	return nil
}

// isRefusal reports whether a Redis error reply will not go away by itself (a command renamed or
// denied, bad credentials), as opposed to a transient one such as LOADING after a restart.
func isRefusal(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"NOPERM", "NOAUTH", "WRONGPASS"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "unknown command")
}

// checkDurability reads the persistence settings. Without appendonly yes and appendfsync always an
// acknowledged INCRBY can be lost in a restart, and the counter would issue its IDs again.
func (in *instance) checkDurability(ctx context.Context) error {
	cfg := in.store.cfg
	params := []string{"appendonly", "appendfsync", "maxmemory-policy"}
	pipe := in.client.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(params))
	for i, p := range params {
		cmds[i] = pipe.ConfigGet(ctx, p)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if isRefusal(err) && !cfg.AllowVolatile {
			return fmt.Errorf("%w: cannot read the persistence settings of Redis %s (CONFIG GET: %v); allow CONFIG GET for ticketd's user, or accept that a restart may reissue IDs with AllowVolatile (ticketd: --allow-volatile-redis)",
				allocator.ErrMisconfigured, in.Name(), err)
		}
		if !isRefusal(err) {
			return fmt.Errorf("%s: %w", in.Name(), err)
		}
		in.warnVolatile("persistence settings unreadable: " + err.Error())
		return nil
	}
	val := func(i int) string { return cmds[i].Val()[params[i]] }
	var problems []string
	if v := val(0); v != "yes" {
		problems = append(problems, fmt.Sprintf("appendonly is %q, so a restart loses every lease since the last snapshot", v))
	} else if v := val(1); v != "always" {
		problems = append(problems, fmt.Sprintf("appendfsync is %q, so a crash loses the leases of the last second or so", v))
	}
	if v := val(2); strings.HasPrefix(v, "allkeys-") {
		problems = append(problems, fmt.Sprintf("maxmemory-policy is %q, so Redis may evict a counter when memory runs short", v))
	}
	if len(problems) == 0 {
		return nil
	}
	why := strings.Join(problems, "; ")
	if !cfg.AllowVolatile {
		return fmt.Errorf("%w: Redis %s can lose acknowledged writes, and a lost lease means IDs issued twice: %s. "+
			"Set appendonly yes, appendfsync always and maxmemory-policy noeviction (in redis.conf, or CONFIG SET then CONFIG REWRITE), "+
			"or accept that a restart may reissue IDs with AllowVolatile (ticketd: --allow-volatile-redis)",
			allocator.ErrMisconfigured, in.Name(), why)
	}
	in.warnVolatile(why)
	return nil
}

func (in *instance) warnVolatile(why string) {
	in.mu.Lock()
	warned := in.warned
	in.warned = true
	in.mu.Unlock()
	if !warned {
		in.store.cfg.Logger.Warn("Redis instance can lose acknowledged writes: a restart can move a counter back and reissue IDs (allowed by configuration)",
			"server", in.Name(), "why", why)
	}
}

// catchUp gives the instance the namespaces that the usable instances, and this process, know and it
// lacks, and the settings and floors it missed while it was away — also when the instances holding a
// change are away now. A namespace it lacks although a water mark says it issued from it is not
// created: the instance lost its data, and checkFence fences it.
func (in *instance) catchUp(ctx context.Context) error {
	mine, err := in.readRecords(ctx)
	if err != nil {
		return err
	}
	latest := map[string]record{}
	for _, p := range in.store.set.All() {
		if p == in || !p.Usable() {
			continue
		}
		if recs, err := p.readRecords(ctx); err == nil {
			for _, r := range recs {
				failover.KeepLatest(latest, r)
			}
		}
	}
	for _, r := range in.store.set.Known() {
		failover.KeepLatest(latest, r)
	}
	for name, r := range latest {
		m, ok := mine[name]
		switch {
		case !ok && in.marks.Get(name).Value > 0:
			continue
		case !ok:
			err = in.ensure(ctx, r)
		case r.updatedUS > m.updatedUS || r.floor > m.floor || r.ceilingUS > m.ceilingUS:
			err = in.update(ctx, r)
			if errors.Is(err, allocator.ErrInvalidSettings) {
				in.store.cfg.Logger.Warn("a newer max_id of a namespace is below what an instance already issued; the instance keeps its own, and leases stay below the newer one",
					"server", in.Name(), "namespace", name, "err", err)
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("%s: namespace %q: %w", in.Name(), name, err)
		}
	}
	return nil
}

// Namespace is the record's settings; its Start is the highest start the namespace was created or
// advanced with.
func (r record) Namespace() allocator.Namespace {
	ns := r.ns
	ns.Start = max(ns.Start, r.floor)
	return ns
}

// UpdatedUS is when the record's settings last changed.
func (r record) UpdatedUS() int64 { return r.updatedUS }

// CeilingUS is when the record's max_id was set (0: unknown).
func (r record) CeilingUS() int64 { return r.ceilingUS }

// WithLimits is the record with another ceiling and start (see failover.Merge).
func (r record) WithLimits(maxID, ceilingUS, start int64) record {
	r.ns.MaxID, r.ceilingUS, r.floor = maxID, ceilingUS, max(r.floor, start)
	return r
}

// ReadRecord reads the instance's settings of a namespace; found is false when it has none.
func (in *instance) ReadRecord(ctx context.Context, name string) (record, bool, error) {
	r, err := in.readRecord(ctx, name)
	if errors.Is(err, errMissing) {
		return r, false, nil
	}
	return r, err == nil, err
}

// ReadRecords reads the settings of every namespace of the instance.
func (in *instance) ReadRecords(ctx context.Context) ([]record, error) {
	recs, err := in.readRecords(ctx)
	out := make([]record, 0, len(recs))
	for _, r := range recs {
		out = append(out, r)
	}
	return out, err
}

func (in *instance) readRecord(ctx context.Context, name string) (record, error) {
	m, err := in.client.HGetAll(ctx, in.store.keys.settings(name)).Result()
	if err != nil {
		return record{}, err
	}
	if len(m) == 0 {
		return record{}, errMissing
	}
	return parseRecord(name, m)
}

// readRecords reads every namespace of the instance in two round trips.
func (in *instance) readRecords(ctx context.Context) (map[string]record, error) {
	names, err := in.client.SMembers(ctx, in.store.keys.index()).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]record, len(names))
	if len(names) == 0 {
		return out, nil
	}
	pipe := in.client.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(names))
	for i, name := range names {
		cmds[i] = pipe.HGetAll(ctx, in.store.keys.settings(name))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	for i, name := range names {
		if allocator.ValidateName(name) != nil || len(cmds[i].Val()) == 0 {
			continue // not made by ticketd
		}
		r, err := parseRecord(name, cmds[i].Val())
		if err != nil {
			return nil, err
		}
		out[name] = r
	}
	return out, nil
}

// lease is the one-call lease: the script checks that the instance is still the one whose claim was
// proven, the namespace and the counter against its floor, raises the counter to the namespace's
// start, and moves it by size×stride with INCRBY, returning the counter before the move, which is the
// block's first ID.
func (in *instance) lease(ctx context.Context, rec record, size int64) (allocator.Block, error) {
	id := in.checked.Load()
	if id == nil {
		return allocator.Block{}, fmt.Errorf("%s: %w", in.Name(), errNotChecked)
	}
	ns := rec.Namespace()
	stride := in.store.cfg.Stride
	first, ok := failover.FirstAtLeast(ns.Start, stride, in.offset)
	if !ok {
		return allocator.Block{}, fmt.Errorf("%w: namespace %q starts at %d, which leaves no ID for %s (offset %d of %d)",
			allocator.ErrExhausted, ns.Name, ns.Start, in.Name(), in.offset, stride)
	}
	floor, local := in.marks.Get(ns.Name), in.local.Get(ns.Name)
	k := in.store.keys
	res, err := leaseScript.Run(ctx, in.client, []string{k.counter(ns.Name), k.settings(ns.Name), k.identity(), k.local()},
		size, size*stride, stride, in.offset%stride, floor.Value, first, *id, int64(math.MaxInt64)-stride,
		ns.WithDefaults().MaxID, local.Value, ns.Name).StringSlice()
	if err != nil {
		return allocator.Block{}, err
	}
	if len(res) == 0 {
		return allocator.Block{}, fmt.Errorf("redis: lease script answered nothing")
	}
	arg := ""
	if len(res) > 1 {
		arg = res[1]
	}
	switch res[0] {
	case "ok":
		cur, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || cur < 1 || len(res) < 3 {
			return allocator.Block{}, fmt.Errorf("%w: %s's counter for %q was %q", allocator.ErrMisconfigured, in.Name(), ns.Name, arg)
		}
		// Below the namespace's ceiling the script may have cut the block short.
		if n, err := strconv.ParseInt(res[2], 10, 64); err != nil || n < 1 || n > size {
			return allocator.Block{}, fmt.Errorf("redis: lease script took %q IDs of %d", res[2], size)
		} else {
			size = n
		}
		if len(res) > 3 {
			if count, err := strconv.ParseInt(res[3], 10, 64); err == nil {
				in.local.Observe(ns.Name, failover.Mark{Value: count, Holder: failover.ThisProcess})
			}
		}
		in.marks.Leased(ns.Name, cur+size*stride, size*stride, "")
		return allocator.BlockEnding(ns.Name, in.Name(), cur+size*stride, stride, size, allocator.ExpiryFor(in.store.cfg.now(), ns.LeaseTTL))
	case "ceiling":
		top := ""
		if len(res) > 2 {
			top = res[2]
		}
		return allocator.Block{}, fmt.Errorf("%w: namespace %q reached its max_id %s on %s (counter %s, step %d)",
			allocator.ErrExhausted, ns.Name, top, in.Name(), arg, stride)
	case "identity":
		if arg == "" {
			return allocator.Block{}, in.store.fenceLost(in, "its identity is gone while it served: its data was wiped, or another Redis answers at its address")
		}
		return allocator.Block{}, fmt.Errorf("%w: %s now answers as instance %s, not instance %s whose offset claim was checked; another Redis answers at its address",
			allocator.ErrMisconfigured, in.Name(), arg, *id)
	case "behind":
		return allocator.Block{}, in.fenceBelow(ns.Name, arg, floor)
	case "copy":
		return allocator.Block{}, in.fenceCopy(ns.Name, arg, local)
	case "missing":
		if floor.Value > 0 {
			return allocator.Block{}, in.store.fence(in, []string{ns.Name}, []string{fmt.Sprintf("namespace %q is gone but %s saw its counter at %d", ns.Name, floor.Holder, floor.Value)})
		}
		return allocator.Block{}, errMissing
	case "size":
		return allocator.Block{}, fmt.Errorf("%w: %d is above namespace %q's max_block_size %s", allocator.ErrInvalidSize, size, ns.Name, arg)
	case "exhausted":
		return allocator.Block{}, fmt.Errorf("%w: %s's counter for %q is %s; %d more IDs of step %d would pass %d",
			allocator.ErrExhausted, in.Name(), ns.Name, arg, size, stride, int64(math.MaxInt64))
	case "residue":
		return allocator.Block{}, fmt.Errorf("%w: %s's counter for %q is %s, not ≡ offset %d (mod %d); it was changed outside ticketd",
			allocator.ErrMisconfigured, in.Name(), ns.Name, arg, in.offset, stride)
	default:
		return allocator.Block{}, fmt.Errorf("%w: %s's counter for %q holds %q, not a counter; it was changed outside ticketd",
			allocator.ErrMisconfigured, in.Name(), ns.Name, arg)
	}
}

// create makes the namespace on this instance; created reports whether it was new here. The counter
// starts at the first ID of this instance's residue at or above the namespace's start (or floor) and
// from.
func (in *instance) create(ctx context.Context, rec record, from int64) (created bool, err error) {
	stride := in.store.cfg.Stride
	lowest := max(rec.ns.Start, rec.floor, from)
	first, ok := failover.FirstAtLeast(lowest, stride, in.offset)
	if !ok {
		return false, fmt.Errorf("%w: start %d leaves no ID for %s (offset %d of %d)", allocator.ErrExhausted, lowest, in.Name(), in.offset, stride)
	}
	k := in.store.keys
	res, err := createScript.Run(ctx, in.client, []string{k.settings(rec.ns.Name), k.counter(rec.ns.Name), k.index()},
		rec.ns.Name, first, rec.ns.Start, rec.floor, rec.ns.BlockSize, rec.ns.MaxBlockSize, rec.ns.LeaseTTL.Milliseconds(), rec.updatedUS,
		rec.ns.WithDefaults().MaxID, rec.ceilingUS).StringSlice()
	if err != nil {
		return false, err
	}
	switch res[0] {
	case "created":
		return true, nil
	case "exists", "repaired":
		return false, nil
	default:
		return false, fmt.Errorf("%w: %s's counter for %q holds %q, not a counter; it was changed outside ticketd",
			allocator.ErrMisconfigured, in.Name(), rec.ns.Name, strings.Join(res[1:], " "))
	}
}

// ensure creates the namespace on this instance if it lacks it.
func (in *instance) ensure(ctx context.Context, rec record) error {
	created, err := in.create(ctx, rec, 0)
	if created {
		in.store.cfg.Logger.Info("namespace created on a Redis instance that missed it", "server", in.Name(), "namespace", rec.ns.Name)
	}
	return err
}

// update writes settings (unless newer ones are stored, the ceiling by its own time) and raises the
// floor and the counter to rec.floor; a namespace this instance lacks is created first. A ceiling
// below an ID the instance issued is never written: nothing changes, and the error
// (ErrInvalidSettings) names the highest ID issued.
func (in *instance) update(ctx context.Context, rec record) error {
	stride := in.store.cfg.Stride
	var floorCounter int64
	if rec.floor > 0 {
		f, ok := failover.FirstAtLeast(rec.floor, stride, in.offset)
		if !ok {
			return fmt.Errorf("%w: start %d leaves no ID for %s (offset %d of %d)", allocator.ErrExhausted, rec.floor, in.Name(), in.offset, stride)
		}
		floorCounter = f
	}
	maxID := rec.ns.WithDefaults().MaxID
	var limit int64 // the highest counter that issued nothing above maxID
	if maxID <= math.MaxInt64-stride {
		limit = maxID + stride
	}
	k := in.store.keys
	mark := in.marks.Get(rec.ns.Name)
	run := func() ([]string, error) {
		return updateScript.Run(ctx, in.client, []string{k.settings(rec.ns.Name), k.counter(rec.ns.Name)},
			rec.ns.BlockSize, rec.ns.MaxBlockSize, rec.ns.LeaseTTL.Milliseconds(), rec.updatedUS, rec.floor, floorCounter,
			maxID, rec.ceilingUS, limit, mark.Value).StringSlice()
	}
	res, err := run()
	if err == nil && res[0] == "missing" {
		if err = in.ensure(ctx, rec); err == nil {
			res, err = run()
		}
	}
	switch {
	case err != nil:
		return err
	case res[0] == "ok":
		return nil
	case res[0] == "missing":
		return errMissing
	case res[0] == "behind" && len(res) > 1:
		return in.fenceBelow(rec.ns.Name, res[1], mark)
	case res[0] == "passed" && len(res) > 1:
		cur, _ := strconv.ParseInt(res[1], 10, 64)
		return allocator.CheckLowering(rec.ns.Name, maxID, cur-stride)
	default:
		return fmt.Errorf("%w: %s's counter for %q holds %q, not a counter; it was changed outside ticketd",
			allocator.ErrMisconfigured, in.Name(), rec.ns.Name, strings.Join(res[1:], " "))
	}
}
