package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// Diagnosis is what Diagnose found on every configured Redis instance.
type Diagnosis struct {
	Instances  []InstanceDiagnosis
	Namespaces []NamespaceDiagnosis
	// Problems would make ticketd refuse or fence an instance, or risk duplicates; each says how to fix
	// it.
	Problems []string
	// Notes are worth knowing but harmless.
	Notes []string
}

// OK reports whether no problem was found.
func (d Diagnosis) OK() bool { return len(d.Problems) == 0 }

// InstanceDiagnosis is one instance's settings and offset claim.
type InstanceDiagnosis struct {
	Name        string
	Reachable   bool
	Error       string
	Version     string
	AppendOnly  string
	AppendFsync string
	Eviction    string // maxmemory-policy
	// Offset and Stride are the configured ones; Claim is what the instance stores: "offset/stride",
	// "none", or "offset/stride (unproven)" while not every instance recorded it.
	Offset, Stride int64
	Claim          string
	ID             string
}

// NamespaceDiagnosis is one namespace's counter on one instance.
type NamespaceDiagnosis struct {
	Namespace string
	Instance  string
	Present   bool
	Next      int64
	// Watermark is the highest counter a peer recorded for this instance (0 if none), and Holder the
	// peer.
	Watermark int64
	Holder    string
	Status    string // "ok", or what is wrong
}

// Diagnose checks every instance in cfg without refusing any: reachability, version, persistence and
// eviction settings, each instance's offset claim against the configuration and the peers' records,
// and each namespace's counter against the peers' water marks. Only a configuration error is an error.
func Diagnose(ctx context.Context, cfg Config) (Diagnosis, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Diagnosis{}, err
	}
	s, err := build(cfg)
	if err != nil {
		return Diagnosis{}, err
	}
	defer s.closeClients()
	var d Diagnosis
	problem := func(format string, a ...any) { d.Problems = append(d.Problems, fmt.Sprintf(format, a...)) }
	all := s.set.All()
	d.Instances = make([]InstanceDiagnosis, len(all))
	descs := make([]*description, len(all))
	var wg sync.WaitGroup
	for i, in := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Instances[i], descs[i] = in.diagnose(ctx)
		}()
	}
	wg.Wait()

	stride := strconv.FormatInt(cfg.Stride, 10)
	byID := map[string]string{}
	for i, in := range all {
		id := d.Instances[i]
		if !id.Reachable {
			problem("%s is unreachable (%s): start it or fix its address; ticketd serves from the others meanwhile, and an instance that never claimed its offset waits for every instance to answer once", in.Name(), id.Error)
			continue
		}
		if id.AppendOnly != "yes" || id.AppendFsync != "always" {
			why := fmt.Sprintf("%s has appendonly %s and appendfsync %s: a restart can lose acknowledged leases and reissue IDs; set appendonly yes and appendfsync always (or run with --allow-volatile-redis knowingly)", in.Name(), id.AppendOnly, id.AppendFsync)
			if cfg.AllowVolatile {
				d.Notes = append(d.Notes, why)
			} else {
				problem("%s", why)
			}
		}
		if strings.HasPrefix(id.Eviction, "allkeys-") {
			problem("%s has maxmemory-policy %s: Redis may evict a counter; set maxmemory-policy noeviction", in.Name(), id.Eviction)
		}
		self := descs[i]
		offset := strconv.FormatInt(in.offset, 10)
		switch {
		case self.identity["stride"] == "":
			var lost []string
			for j, p := range all {
				if j == i || descs[j] == nil {
					continue
				}
				if h, ok := descs[j].claims[offset]; ok {
					lost = append(lost, fmt.Sprintf("%s records offset %s as held by instance %s", p.Name(), offset, h))
				}
				if m := descs[j].marksFor(in.offset); len(m) > 0 {
					lost = append(lost, fmt.Sprintf("%s keeps water marks for it", p.Name()))
				}
			}
			if len(lost) > 0 {
				problem("%s has no identity but %s: it lost its data; check it, then run `ticketd repair NAMESPACE --server %s` for each namespace (every instance must answer)",
					in.Name(), strings.Join(lost, "; "), in.Name())
			} else {
				d.Notes = append(d.Notes, fmt.Sprintf("%s has not claimed offset %s yet: it does at its first start with every instance answering", in.Name(), offset))
			}
		case self.identity["stride"] != stride || self.identity["offset"] != offset:
			problem("%s serves offset %s of stride %s but is configured as offset %s of stride %s: configure it as it was (offsets follow the order of the addresses unless set)",
				in.Name(), self.identity["offset"], self.identity["stride"], offset, stride)
		case self.identity["proven"] != "1":
			d.Notes = append(d.Notes, fmt.Sprintf("%s's claim of offset %s is not proven yet: not every instance has recorded it (it will be once every instance answers at the same time)", in.Name(), offset))
		}
		if myID := self.identity["id"]; myID != "" {
			if other, dup := byID[myID]; dup {
				problem("%s and %s are one Redis instance (instance %s): list each instance once", other, in.Name(), myID)
			}
			byID[myID] = in.Name()
			for j, p := range all {
				if j == i || descs[j] == nil {
					continue
				}
				if h, ok := descs[j].claims[offset]; ok && h != myID {
					problem("%s records offset %s as held by instance %s, but %s is instance %s: two instances claim one offset; check the configured addresses and offsets",
						p.Name(), offset, h, in.Name(), myID)
				}
			}
		}
	}

	// Counters against the peers' water marks.
	names := map[string]bool{}
	recs := make([]map[string]record, len(all))
	for i, in := range all {
		if descs[i] == nil {
			continue
		}
		r, err := in.readRecords(ctx)
		if err != nil {
			problem("reading the namespaces of %s: %v", in.Name(), err)
			continue
		}
		recs[i] = r
		for n := range r {
			names[n] = true
		}
		for j := range all {
			if j != i && descs[j] != nil {
				for n := range descs[j].marksFor(in.offset) {
					names[n] = true
				}
			}
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for i, in := range all {
		if recs[i] == nil {
			continue
		}
		for _, name := range sorted {
			nd := NamespaceDiagnosis{Namespace: name, Instance: in.Name(), Status: "ok"}
			for j, p := range all {
				if j != i && descs[j] != nil {
					if v := descs[j].marksFor(in.offset)[name]; v > nd.Watermark {
						nd.Watermark, nd.Holder = v, p.Name()
					}
				}
			}
			v, err := in.client.Get(ctx, s.keys.counter(name)).Int64()
			switch {
			case errors.Is(err, goredis.Nil) && nd.Watermark > 0:
				nd.Status = "fenced: gone below water mark"
				problem("namespace %q is gone from %s but %s recorded counter %d: the instance lost its data or was restored from an old file; check it, then run `ticketd repair %s --server %s`",
					name, in.Name(), nd.Holder, nd.Watermark, name, in.Name())
			case errors.Is(err, goredis.Nil):
				nd.Status = "no counter yet"
				d.Notes = append(d.Notes, fmt.Sprintf("namespace %q has no counter on %s (created while it was away); ticketd creates it when the instance is next checked", name, in.Name()))
			case err != nil:
				nd.Status = "unreadable: " + err.Error()
				problem("reading namespace %q on %s: %v", name, in.Name(), err)
			default:
				nd.Present, nd.Next = true, v
				if v < nd.Watermark {
					nd.Status = "fenced: counter below water mark"
					problem("namespace %q on %s: counter %d is below %d recorded by %s: the instance went back in time (an old RDB or AOF?); check it, then run `ticketd repair %s --server %s`",
						name, in.Name(), v, nd.Watermark, nd.Holder, name, in.Name())
				}
			}
			d.Namespaces = append(d.Namespaces, nd)
		}
	}
	return d, nil
}

// diagnose reads one instance's version, settings and description.
func (in *instance) diagnose(ctx context.Context) (InstanceDiagnosis, *description) {
	id := InstanceDiagnosis{Name: in.Name(), Offset: in.offset, Stride: in.store.cfg.Stride, Claim: "none"}
	ctx, cancel := context.WithTimeout(ctx, in.store.cfg.AttemptTimeout)
	defer cancel()
	info, err := in.client.InfoMap(ctx, "server").Result()
	if err != nil {
		id.Error = err.Error()
		return id, nil
	}
	id.Reachable, id.Version = true, info["Server"]["redis_version"]
	for param, dst := range map[string]*string{"appendonly": &id.AppendOnly, "appendfsync": &id.AppendFsync, "maxmemory-policy": &id.Eviction} {
		if v, err := in.client.ConfigGet(ctx, param).Result(); err == nil {
			*dst = v[param]
		} else {
			*dst = "unreadable"
		}
	}
	d, err := in.describe(ctx)
	if err != nil {
		id.Reachable, id.Error = false, err.Error()
		return id, nil
	}
	if st := d.identity["stride"]; st != "" {
		id.Claim, id.ID = d.identity["offset"]+"/"+st, d.identity["id"]
		if d.identity["proven"] != "1" {
			id.Claim += " (unproven)"
		}
	}
	return id, &d
}
