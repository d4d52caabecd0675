//go:build !unix

package badger

// directoryLocked cannot ask the lock here; a directory in use is then
// reported as a failed open.
func directoryLocked(string) bool { return false }
