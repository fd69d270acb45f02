package embedded

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestNewFileIsSyncedIntoItsDirectories: opening a store that creates its file flushes the data
// directory and every directory made for it, so that a crash cannot lose the file itself; opening it
// again flushes nothing.
func TestNewFileIsSyncedIntoItsDirectories(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	var synced []string
	cfg := Config{Dir: dir, syncDir: func(d string) error { synced = append(synced, d); return nil }}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	want := []string{dir, filepath.Join(root, "a"), root}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %v, want %v", synced, want)
	}
	synced = nil
	s, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if len(synced) != 0 {
		t.Fatalf("reopening synced %v", synced)
	}
	if err := syncDir(dir); err != nil {
		t.Fatalf("syncDir on a real directory: %v", err)
	}
}
