package version

import (
	"runtime/debug"
	"testing"
)

func TestRead(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name                      string
		bi                        debug.BuildInfo
		version, commit, modified string
		want                      Info
		line                      string
	}{
		{name: "go install of a release", bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			want: Info{Version: "v0.1.0", Go: "go1.26.8"}, line: "ticketd v0.1.0 (commit unknown, tree unknown, go1.26.8)"},
		{name: "a clean checkout", bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123abcd", "false")},
			want: Info{Version: "(devel)", Commit: "0123abcd", Go: "go1.26.8"}, line: "ticketd (devel) (commit 0123abcd, clean, go1.26.8)"},
		{name: "a checkout with changes", bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20260101000000-0123abcd+dirty"}, Settings: vcs("0123abcd", "true")},
			want: Info{Version: "v0.1.1-0.20260101000000-0123abcd", Commit: "0123abcd", Dirty: true, Go: "go1.26.8"},
			line: "ticketd v0.1.1-0.20260101000000-0123abcd (commit 0123abcd, dirty, go1.26.8)"},
		{name: "the linker's values win", bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			version: "v0.2.0", commit: "fedcba98", modified: "true",
			want: Info{Version: "v0.2.0", Commit: "fedcba98", Dirty: true, Go: "go1.26.8"}, line: "ticketd v0.2.0 (commit fedcba98, dirty, go1.26.8)"},
		{name: "nothing known", want: Info{Version: "(devel)", Go: "unknown"}, line: "ticketd (devel) (commit unknown, tree unknown, unknown)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := read(&tc.bi, tc.version, tc.commit, tc.modified)
			if got != tc.want {
				t.Fatalf("read = %+v, want %+v", got, tc.want)
			}
			if got.String() != tc.line {
				t.Fatalf("String = %q, want %q", got.String(), tc.line)
			}
		})
	}
}
