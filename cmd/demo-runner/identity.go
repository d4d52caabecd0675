package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/runstate/runstate/internal/privatedir"
)

// A worker id must be unique among live processes (docs/spec.md, LEASE):
// a later incarnation of a worker takes over its earlier incarnation's
// leases at once, so two live processes sharing an id would take each
// other's runs. Every process that claims runs therefore holds a lock for
// its worker id, per store, on this machine. A lock that can be taken
// proves that no live process on this machine holds the id; the worker's
// previous incarnation, if it held it, is dead.

// workerLock is the held lock of one worker id.
type workerLock struct {
	f *os.File
}

func (l *workerLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	return l.f.Close() // closing the file releases the lock
}

// lockWorkerID takes the lock of id for store. When another live process
// holds it: an explicit id is refused; the default id (the host name)
// becomes the first free of host-2, host-3, …, so that several processes
// on one host each have their own, and a restarted process usually gets
// its previous incarnation's back.
func lockWorkerID(store, id string, explicit bool) (string, *workerLock, error) {
	sum := sha256.Sum256([]byte(store))
	dir, err := privatedir.UnderTemp("workers", hex.EncodeToString(sum[:8]))
	if err != nil {
		return "", nil, exitError{Code: exitFailure, Msg: "worker id locks: " + err.Error()}
	}
	for n := 1; n <= 64; n++ {
		candidate := id
		if n > 1 {
			candidate = fmt.Sprintf("%s-%d", id, n)
		}
		l, holder, err := tryLockID(dir, candidate)
		if err != nil {
			return "", nil, exitError{Code: exitFailure, Msg: "worker id lock: " + err.Error()}
		}
		if l != nil {
			return candidate, l, nil
		}
		if explicit {
			return "", nil, usageError("worker id %q is in use by another live process on this machine (%s) for this store; "+
				"give each process its own --worker-id (two processes sharing one would take each other's runs)", id, holder)
		}
	}
	return "", nil, exitError{Code: exitFailure, Msg: fmt.Sprintf("no free worker id from %q to %q-64", id, id)}
}

// tryLockID takes the lock of id in dir, or returns who holds it.
func tryLockID(dir, id string) (*workerLock, string, error) {
	sum := sha256.Sum256([]byte(id))
	path := filepath.Join(dir, hex.EncodeToString(sum[:8])+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, "", err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, strings.TrimSpace(string(b)), nil
		}
		return nil, "", err
	}
	f.Truncate(0)
	fmt.Fprintf(f, "pid %d, worker id %s\n", os.Getpid(), id)
	return &workerLock{f: f}, "", nil
}
