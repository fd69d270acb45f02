// Package version says which build of ticketd is running: the module version, the commit and whether
// the source tree had uncommitted changes. It reads them from the Go build info; a build without the
// repository at hand (the Dockerfile's) passes them with -ldflags instead:
//
//	go build -ldflags "-X github.com/ticketd/ticketd/internal/version.version=v0.1.0 \
//	  -X github.com/ticketd/ticketd/internal/version.commit=$(git rev-parse HEAD)" ./cmd/ticketd
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Set with -ldflags -X where the build info holds no version or commit. modified is "true" for a tree
// with uncommitted changes.
var version, commit, modified string

// Info is a build of ticketd.
type Info struct {
	// Version is the module version ("v0.1.0"), or "(devel)" for a build from a checkout that names
	// none.
	Version string `json:"version"`
	// Commit is the VCS revision; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Dirty means the tree had uncommitted changes.
	Dirty bool `json:"dirty"`
	// Go is the Go release it was built with.
	Go string `json:"go"`
}

// Get returns the running build's Info.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	return read(bi, version, commit, modified)
}

// read takes the linker's values first, then the build info's.
func read(bi *debug.BuildInfo, version, commit, modified string) Info {
	in := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.modified":
			in.Dirty = s.Value == "true"
		}
	}
	if version != "" {
		in.Version = version
	}
	if commit != "" {
		in.Commit, in.Dirty = commit, modified == "true"
	}
	// Go stamps a build from a checkout with uncommitted changes "+dirty".
	if v, ok := strings.CutSuffix(in.Version, "+dirty"); ok {
		in.Version, in.Dirty = v, true
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if in.Go == "" {
		in.Go = "unknown"
	}
	return in
}

// String is the one line `ticketd version` prints: "ticketd v0.1.0 (commit 0123abcd, clean, go1.26.8)".
func (in Info) String() string {
	commit := "commit unknown"
	if in.Commit != "" {
		commit = "commit " + in.Commit
	}
	tree := "clean"
	if in.Dirty {
		tree = "dirty"
	} else if in.Commit == "" {
		tree = "tree unknown"
	}
	return fmt.Sprintf("ticketd %s (%s, %s, %s)", in.Version, commit, tree, in.Go)
}
