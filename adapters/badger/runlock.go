package badger

import (
	"context"
	"sync"
)

// runLocks are this process's locks on single runs. Badger's transactions
// are optimistic: two writers of one run both proceed and the later commit
// conflicts and retries, so a run written in a tight loop could starve a
// claim of it. Every write of an existing run holds the run's lock for its
// transaction, as a database row lock would; one process owns the
// directory, so these locks see every writer. Conflict detection still
// decides correctness; the locks only keep writers of one run in line.
type runLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed on unlock
}

// tryLock takes the lock of id when it is free. Otherwise it returns a
// channel that closes when the holder lets go.
func (l *runLocks) tryLock(id string) (heldUntil <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if done, ok := l.held[id]; ok {
		return done
	}
	if l.held == nil {
		l.held = map[string]chan struct{}{}
	}
	l.held[id] = make(chan struct{})
	return nil
}

// heldBy returns, when the lock of id is held, a channel that closes when
// its holder lets go; nil when it is free.
func (l *runLocks) heldBy(id string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[id]
}

// lock waits for the lock of id, or for ctx to end.
func (l *runLocks) lock(ctx context.Context, id string) error {
	for {
		busy := l.tryLock(id)
		if busy == nil {
			return nil
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *runLocks) unlock(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		close(l.held[id])
		delete(l.held, id)
	}
}

// updateRun runs fn in a read-write transaction holding runID's lock.
func (s *storage) updateRun(ctx context.Context, runID string, fn func(t *tx) error) error {
	if err := s.locks.lock(ctx, runID); err != nil {
		return err
	}
	defer s.locks.unlock(runID)
	return s.update(ctx, fn)
}
