package mysql

import (
	"testing"
	"time"
)

// TestIncarnationContinues: a later reading continues a run only when the uptime grew with the time
// between the readings, the connections did not go back and the identity is the same.
func TestIncarnationContinues(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	base := incarnation{identity: "server_id 1", uptime: time.Hour, connections: 500, at: at}
	later := func(d, up time.Duration, conns int64) incarnation {
		return incarnation{identity: "server_id 1", uptime: up, connections: conns, at: at.Add(d)}
	}
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		next incarnation
		want bool
	}{
		{"a minute later", later(time.Minute, time.Hour+time.Minute, 510), true},
		{"the same second", later(0, time.Hour, 500), true},
		{"uptime read a second short", later(time.Minute, time.Hour+time.Minute-time.Second, 510), true},
		{"a day later, the clocks drifted a minute apart", later(day, time.Hour+day-time.Minute, 9000), true},
		{"restarted and up a minute", later(2*time.Minute, time.Minute, 510), false},
		{"restarted, with fewer connections since", later(time.Minute, time.Hour+time.Minute, 20), false},
		{"another server at the address", incarnation{identity: "server_id 2", uptime: time.Hour + time.Minute, connections: 510, at: at.Add(time.Minute)}, false},
		{"the server's clock stepped back", later(time.Minute, time.Hour-time.Minute, 510), false},
		{"read before the base", later(-time.Minute, time.Hour, 500), false},
	} {
		if got := base.continues(tc.next); got != tc.want {
			t.Errorf("%s: continues = %v, want %v", tc.name, got, tc.want)
		}
	}
	young := incarnation{identity: "server_id 1", uptime: time.Second, connections: 3, at: at}
	if young.continues(incarnation{identity: "server_id 1", uptime: 2 * time.Second, connections: 4, at: at.Add(time.Second)}) {
		t.Error("a run a second old when first read continues; want it not told from a new one (checked in full)")
	}
}
