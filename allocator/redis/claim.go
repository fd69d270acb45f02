package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// Offset claims. Instance i issues only IDs ≡ offset_i (mod stride), so two instances serving one
// offset issue the same IDs. Each instance stores its identity (a random id, the stride and offset it
// serves) and, in its claims hash, which instance id holds each offset of the set. An instance takes an
// offset only while every instance of the set answers — none may serve it, none may record another
// holder — and the claim is proven once every other instance recorded it. From then on the instance
// serves alone if it must: any later claim of that offset by another instance meets its record. An
// instance that has no identity although a peer records a holder for its offset (or keeps water marks
// for it) lost its data, and is fenced.

// errUnproven means an instance's offset claim cannot be proven exclusive now: some instance of the set
// does not answer. It is not a misconfiguration; the instance is checked again later.
var errUnproven = errors.New("redis: offset claim not proven")

// description is what one instance holds about the set: its identity, its claims, and the water marks
// it keeps for the others.
type description struct {
	identity   map[string]string
	claims     map[string]string // offset → id of the instance that holds it
	marks      map[string]string // "offset:namespace" → highest counter seen
	localMarks map[string]string // "offset:namespace" → highest count of its own leases seen
}

// describe reads the instance's identity, claims and water marks in one round trip.
func (in *instance) describe(ctx context.Context) (description, error) {
	k := in.store.keys
	pipe := in.client.Pipeline()
	ident := pipe.HGetAll(ctx, k.identity())
	claims := pipe.HGetAll(ctx, k.claims())
	marks := pipe.HGetAll(ctx, k.marks())
	local := pipe.HGetAll(ctx, k.localMarks())
	if _, err := pipe.Exec(ctx); err != nil {
		return description{}, fmt.Errorf("%s: %w", in.Name(), err)
	}
	return description{identity: ident.Val(), claims: claims.Val(), marks: marks.Val(), localMarks: local.Val()}, nil
}

// marksFor returns, per namespace, the water mark d keeps for the instance of offset.
func (d description) marksFor(offset int64) map[string]int64 { return fieldsFor(d.marks, offset) }

// observeMarks raises the instance's floors (counters and lease counts) to the water marks d keeps
// for it, held by the instance named holder.
func (in *instance) observeMarks(d description, holder string) {
	for ns, v := range fieldsFor(d.marks, in.offset) {
		in.marks.Observe(ns, failover.Mark{Value: v, Holder: holder})
	}
	for ns, v := range fieldsFor(d.localMarks, in.offset) {
		in.local.Observe(ns, failover.Mark{Value: v, Holder: holder})
	}
}

// fieldsFor returns, per namespace, the value a hash of "offset:namespace" fields holds for offset.
func fieldsFor(hash map[string]string, offset int64) map[string]int64 {
	prefix := strconv.FormatInt(offset, 10) + ":"
	out := map[string]int64{}
	for field, v := range hash {
		ns, ok := strings.CutPrefix(field, prefix)
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[ns] = n
		}
	}
	return out
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claim proves the instance's offset exclusive across the set and returns the id it serves under. It
// refuses (ErrMisconfigured) an instance that serves another offset, one that is listed twice, and one
// whose offset another instance serves or records for another holder; it fences (ErrFenced) one that
// lost its data; and it returns errUnproven while an instance needed for the proof does not answer.
// The peers' water marks for the instance, read on the way, raise its floors.
func (in *instance) claim(ctx context.Context) (string, error) {
	cfg := in.store.cfg
	k := in.store.keys
	offset := strconv.FormatInt(in.offset, 10)
	stride := strconv.FormatInt(cfg.Stride, 10)
	self, err := in.describe(ctx)
	if err != nil {
		return "", err
	}
	if err := in.sameOffset(self.identity); err != nil {
		return "", err
	}
	myID := self.identity["id"]
	peers := map[*instance]description{}
	var unreachable []string
	var lostWhy []string
	for _, p := range in.store.set.All() {
		if p == in {
			continue
		}
		d, err := p.describe(ctx)
		if err != nil {
			unreachable = append(unreachable, p.Name())
			continue
		}
		peers[p] = d
		in.observeMarks(d, p.Name())
		for ns, v := range d.marksFor(in.offset) {
			if myID == "" {
				lostWhy = append(lostWhy, fmt.Sprintf("%s keeps its water mark %d for namespace %q", p.Name(), v, ns))
			}
		}
		pid := d.identity["id"]
		switch {
		case myID != "" && pid == myID:
			return "", fmt.Errorf("%w: %s and %s are one Redis instance (it serves offset %s); list each instance once",
				allocator.ErrMisconfigured, p.Name(), in.Name(), offset)
		case d.identity["offset"] == offset && d.identity["stride"] == stride && pid != myID:
			return "", fmt.Errorf("%w: Redis %s already serves offset %s of stride %s, which %s is configured to serve: they would issue the same IDs; give each instance its own offset (offsets follow the order of the addresses unless set)",
				allocator.ErrMisconfigured, p.Name(), offset, stride, in.Name())
		}
		if holder, ok := d.claims[offset]; ok && holder != myID {
			if myID != "" {
				return "", fmt.Errorf("%w: %s records offset %s as held by instance %s, but %s is instance %s; two instances claim one offset: check the configured addresses and offsets",
					allocator.ErrMisconfigured, p.Name(), offset, holder, in.Name(), myID)
			}
			lostWhy = append(lostWhy, fmt.Sprintf("%s records offset %s as held by instance %s", p.Name(), offset, holder))
		}
	}
	if myID == "" && len(lostWhy) > 0 {
		sort.Strings(lostWhy)
		return "", in.store.fenceLost(in, "it has no identity, but "+strings.Join(lostWhy, "; "))
	}
	if myID == "" && len(unreachable) > 0 {
		return "", in.unproven(unreachable)
	}
	res, err := claimScript.Run(ctx, in.client, []string{k.identity(), k.claims()}, stride, offset, in.Name(), cfg.now().UnixMicro(), newID()).StringSlice()
	if err != nil {
		return "", fmt.Errorf("%s: %w", in.Name(), err)
	}
	switch res[0] {
	case "lost":
		return "", in.store.fenceLost(in, fmt.Sprintf("it has no identity, but its own claims name instance %s as the holder of offset %s", res[1], offset))
	case "conflict":
		return "", in.sameOffset(map[string]string{"stride": res[1], "offset": res[2], "addr": res[3]})
	case "taken":
		return "", fmt.Errorf("%w: %s records offset %s as held by instance %s, but it is instance %s; check the configured addresses and offsets",
			allocator.ErrMisconfigured, in.Name(), offset, res[1], res[2])
	}
	myID, proven := res[1], res[2] == "1"
	// Every peer that answers records the claim; a peer that serves the offset itself, or records
	// another holder, refuses it.
	for p := range peers {
		r, err := recordClaimScript.Run(ctx, p.client, []string{k.claims(), k.identity()}, offset, myID).StringSlice()
		if err != nil {
			unreachable = append(unreachable, p.Name())
			delete(peers, p)
			continue
		}
		if r[0] != "ok" {
			return "", fmt.Errorf("%w: %s refuses %s's claim of offset %s: it %s instance %s; two instances claim one offset: check the configured addresses and offsets",
				allocator.ErrMisconfigured, p.Name(), in.Name(), offset, map[string]string{"conflict": "is", "taken": "records it for"}[r[0]], r[1])
		}
	}
	if proven {
		return myID, nil
	}
	if len(unreachable) > 0 {
		return "", in.unproven(unreachable)
	}
	// Read the peers once more: an instance that took the offset while this one claimed it shows now.
	for p := range peers {
		d, err := p.describe(ctx)
		if err != nil {
			return "", in.unproven([]string{p.Name()})
		}
		if d.identity["offset"] == offset && d.identity["stride"] == stride && d.identity["id"] != myID {
			return "", fmt.Errorf("%w: Redis %s took offset %s while %s claimed it: they would issue the same IDs; give each instance its own offset",
				allocator.ErrMisconfigured, p.Name(), offset, in.Name())
		}
	}
	if err := in.client.HSet(ctx, k.identity(), "proven", "1").Err(); err != nil {
		return "", fmt.Errorf("%s: %w", in.Name(), err)
	}
	return myID, nil
}

// sameOffset refuses an identity that holds another offset or stride than the configured ones.
func (in *instance) sameOffset(ident map[string]string) error {
	cfg := in.store.cfg
	if ident["stride"] == "" || (ident["stride"] == strconv.FormatInt(cfg.Stride, 10) && ident["offset"] == strconv.FormatInt(in.offset, 10)) {
		return nil
	}
	for _, other := range in.store.set.All() {
		if other != in && other.Name() == ident["addr"] && strconv.FormatInt(other.offset, 10) == ident["offset"] && strconv.FormatInt(cfg.Stride, 10) == ident["stride"] {
			return fmt.Errorf("%w: %s and %s are one Redis instance (it serves offset %s, claimed via %s); list each instance once",
				allocator.ErrMisconfigured, other.Name(), in.Name(), ident["offset"], other.Name())
		}
	}
	return fmt.Errorf("%w: Redis %s (key prefix %q) serves offset %s of stride %s (first claimed via %s) but is configured as offset %d of stride %d, "+
		"which could issue IDs another instance issues; configure it as it was (offsets follow the order of the addresses unless set)",
		allocator.ErrMisconfigured, in.Name(), cfg.KeyPrefix, ident["offset"], ident["stride"], ident["addr"], in.offset, cfg.Stride)
}

func (in *instance) unproven(unreachable []string) error {
	return fmt.Errorf("%w: %s cannot prove offset %d its own while %s does not answer: an instance takes an offset only while every instance of the set answers, and serves alone once every other one recorded it",
		errUnproven, in.Name(), in.offset, strings.Join(unreachable, ", "))
}

// adopt gives an instance that lost its data a new identity for its configured offset, and has every
// other instance record it as the offset's holder in place of the lost one. Every instance must answer.
func (in *instance) adopt(ctx context.Context) (string, error) {
	k := in.store.keys
	offset := strconv.FormatInt(in.offset, 10)
	for _, p := range in.store.set.All() {
		if p == in {
			continue
		}
		d, err := p.describe(ctx)
		if err != nil {
			return "", fmt.Errorf("adopting offset %s for %s needs every instance to answer: %w", offset, in.Name(), err)
		}
		if d.identity["offset"] == offset && d.identity["stride"] == strconv.FormatInt(in.store.cfg.Stride, 10) {
			return "", fmt.Errorf("%w: %s serves offset %s itself; %s cannot take it", allocator.ErrMisconfigured, p.Name(), offset, in.Name())
		}
	}
	id := newID()
	now := strconv.FormatInt(in.store.cfg.now().UnixMicro(), 10)
	pipe := in.client.TxPipeline()
	pipe.Del(ctx, k.identity())
	pipe.HSet(ctx, k.identity(), "stride", in.store.cfg.Stride, "offset", offset, "addr", in.Name(), "claimed_us", now, "id", id, "proven", "1")
	pipe.HSet(ctx, k.claims(), offset, id)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", fmt.Errorf("%s: %w", in.Name(), err)
	}
	for _, p := range in.store.set.All() {
		if p == in {
			continue
		}
		if err := p.client.HSet(ctx, k.claims(), offset, id).Err(); err != nil && !errors.Is(err, goredis.Nil) {
			return "", fmt.Errorf("%s: %w", p.Name(), err)
		}
	}
	return id, nil
}
