//go:build unix

package main

import (
	"io/fs"
	"syscall"
)

// fileOwner is the user ID that owns a file.
func fileOwner(st fs.FileInfo) (int, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(sys.Uid), true
}
