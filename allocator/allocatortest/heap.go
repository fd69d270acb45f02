package allocatortest

import "runtime"

// LiveHeap returns the bytes live on the heap after two collections (the second frees what the
// first's finalizers released): what a test compares before and after it makes something to keep.
func LiveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
