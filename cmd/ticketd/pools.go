package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/allocator/redis"
)

// registerPools adds the backend's connection pool statistics to reg: on MySQL, client_golang's
// go_sql_* metrics of each server's pools (db_name "SERVER lease" and "SERVER control"); on Redis,
// ticketd_redis_pool_* of each instance.
func registerPools(reg prometheus.Registerer, b allocator.Backend) error {
	switch b := b.(type) {
	case *mysql.Store:
		for _, p := range b.Pools() {
			if err := reg.Register(collectors.NewDBStatsCollector(p.DB, p.Server+" "+p.Use)); err != nil {
				return err
			}
		}
	case *redis.Store:
		return reg.Register(newRedisPools(b.PoolStats))
	}
	return nil
}

// redisPools reports go-redis's pool statistics of each instance, by its name (label server).
type redisPools struct {
	stats                                                          func() map[string]*goredis.PoolStats
	hits, misses, timeouts, waits, waitSeconds, total, idle, stale *prometheus.Desc
}

func newRedisPools(stats func() map[string]*goredis.PoolStats) *redisPools {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("ticketd_redis_pool_"+name, help, []string{"server"}, nil)
	}
	return &redisPools{stats: stats,
		hits:        d("hits_total", "Times a free connection was found in the instance's pool."),
		misses:      d("misses_total", "Times no free connection was found in the instance's pool (a new one was dialled, or waited for)."),
		timeouts:    d("timeouts_total", "Times a wait for a connection of the instance's pool timed out."),
		waits:       d("waits_total", "Times a request waited for a connection of the instance's pool."),
		waitSeconds: d("wait_seconds_total", "Time spent waiting for a connection of the instance's pool."),
		total:       d("connections", "Connections in the instance's pool."),
		idle:        d("idle_connections", "Idle connections in the instance's pool."),
		stale:       d("stale_connections_total", "Stale connections removed from the instance's pool."),
	}
}

func (r *redisPools) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{r.hits, r.misses, r.timeouts, r.waits, r.waitSeconds, r.total, r.idle, r.stale} {
		ch <- d
	}
}

func (r *redisPools) Collect(ch chan<- prometheus.Metric) {
	for name, s := range r.stats() {
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{r.hits, prometheus.CounterValue, float64(s.Hits)},
			{r.misses, prometheus.CounterValue, float64(s.Misses)},
			{r.timeouts, prometheus.CounterValue, float64(s.Timeouts)},
			{r.waits, prometheus.CounterValue, float64(s.WaitCount)},
			{r.waitSeconds, prometheus.CounterValue, float64(s.WaitDurationNs) / 1e9},
			{r.total, prometheus.GaugeValue, float64(s.TotalConns)},
			{r.idle, prometheus.GaugeValue, float64(s.IdleConns)},
			{r.stale, prometheus.CounterValue, float64(s.StaleConns)},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, name)
		}
	}
}
