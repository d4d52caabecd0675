// Package badger is the embedded reference adapter, on Badger v4: durable
// by default, indexed so that claims, runnable listings, recovery and
// filtered listings read only what matches, and safe for concurrent use
// within one process. A directory belongs to one process at a time.
package badger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/kvindex"
	"github.com/runstate/runstate/driver"
)

var (
	_ runstate.Store     = (*Store)(nil)
	_ driver.Driver      = (*storage)(nil)
	_ driver.NextClaimer = (*storage)(nil)
)

// Options configure Open.
type Options struct {
	// Dir is the data directory; it is created when missing. Required.
	Dir string
	// NoSync turns off the fsync of every commit. Faster, but an acknowledged
	// write can be lost if the machine (not just the process) goes down
	// before the OS writes it back. Leave it off unless losing the last
	// moments of state is acceptable.
	NoSync bool
	// Clock stamps times and decides lease expiry; defaults to the system clock.
	Clock runstate.Clock
	// Logger receives Badger's warnings and errors and the adapter's own
	// messages; defaults to slog.Default().
	Logger *slog.Logger
	// GCInterval is how often value-log garbage collection runs
	// (default 10 minutes; negative disables it, for callers that run
	// RunValueLogGC themselves).
	GCInterval time.Duration
	// Tune, when set, adjusts Badger's options after runstate's defaults
	// (memory budgets, compression, …). It cannot turn off durability: use NoSync.
	Tune func(*bdb.Options)
}

// DefaultGCInterval is the value-log GC period when Options.GCInterval is 0.
const DefaultGCInterval = 10 * time.Minute

// gcDiscardRatio rewrites a value-log file when half of it is garbage,
// Badger's recommendation (write amplification at most 2).
const gcDiscardRatio = 0.5

// maxConflictRetries bounds the retries of a transaction that lost a
// Badger optimistic-concurrency conflict. Each retry re-reads, so a caller
// sees VERSION_CONFLICT only when its expected version is really stale.
const maxConflictRetries = 64

// Store is a runstate store in a Badger directory.
type Store struct {
	driver.Store
	data *storage
}

// storage is the Badger adapter's driver.Driver.
type storage struct {
	db    *bdb.DB
	clock runstate.Clock
	log   *slog.Logger
	dir   string

	// closeMu lets operations run concurrently with each other but not with Close.
	closeMu sync.RWMutex
	closed  bool
	stopGC  chan struct{}
	gcDone  chan struct{}

	locks runLocks

	head queueHead

	// notices wakes the watchers of the runs each commit wrote: one
	// process owns the directory, so every write passes here.
	notices driver.RunNotices
	// runnable wakes idle workers when a commit made a run claimable
	// without a lease.
	runnable driver.RunnableNotices
}

// Open opens (or creates) the store in opts.Dir. A directory another process
// has open is refused with runstate.ErrUnavailable.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(opts.Dir) == "" {
		return nil, runstate.InvalidArgument("dir", "the Badger data directory must be set")
	}
	s := &storage{clock: opts.Clock, log: opts.Logger, dir: opts.Dir,
		head: queueHead{start: map[string][]byte{}}}
	if s.clock == nil {
		s.clock = driver.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	bo := bdb.DefaultOptions(opts.Dir).WithLogger(badgerLogger{s.log}).WithLoggingLevel(bdb.WARNING)
	if opts.Tune != nil {
		opts.Tune(&bo)
	}
	// A commit is on disk before it is acknowledged: a process killed
	// after the answer loses nothing (FAULT-003).
	bo.SyncWrites = !opts.NoSync
	db, err := bdb.Open(bo)
	if err != nil {
		return nil, interpretOpenError(opts.Dir, err)
	}
	s.db = db
	if err := s.checkSchema(); err != nil {
		db.Close()
		return nil, err
	}
	interval := opts.GCInterval
	if interval == 0 {
		interval = DefaultGCInterval
	}
	if interval > 0 {
		s.stopGC, s.gcDone = make(chan struct{}), make(chan struct{})
		go s.gcLoop(interval)
	}
	if opts.NoSync {
		s.log.Warn("runstate badger store opened with NoSync: acknowledged writes may be lost if the machine fails", "dir", opts.Dir)
	}
	s.runnable.NextWake(s.nextWake)
	return &Store{Store: driver.WrapWith(s, driver.WrapOptions{Logger: s.log}), data: s}, nil
}

func (s *storage) checkSchema() error {
	return interpretError(s.db.Update(func(txn *bdb.Txn) error {
		item, err := txn.Get(layout.Meta("schema"))
		if errors.Is(err, bdb.ErrKeyNotFound) {
			return txn.Set(layout.Meta("schema"), []byte(schemaVersion))
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err == nil && string(v) == schemaBeforeParking {
			return txn.Set(layout.Meta("schema"), []byte(schemaVersion))
		}
		if err == nil && string(v) != schemaVersion {
			err = runstate.Unavailable(fmt.Sprintf("badger directory %s has layout version %q; this build reads %q", s.dir, v, schemaVersion), nil)
		}
		return err
	}))
}

var (
	_ runstate.RunWatcher      = (*Store)(nil)
	_ runstate.RunnableWatcher = (*Store)(nil)
)

// Features implements runstate.RunStateStore: the kit's, with batch
// creates, run watches and runnable watches.
func (s *Store) Features() runstate.Features { return runstate.FeaturesOf(s) }

// WatchRun implements runstate.RunWatcher: every commit of this store
// wakes the watchers of the runs it wrote.
func (s *Store) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	return s.data.notices.WatchRun(ctx, p)
}

// nextWake returns the earliest wake time after after among the parked
// runs (the statuses a run may be parked in), for the notices of runs that
// come due.
func (s *storage) nextWake(after time.Time) (time.Time, bool) {
	// An alarm may ring as the store closes: Close waits for this read,
	// and a closed store has no alarm to set.
	if s.enter(context.Background()) != nil {
		return time.Time{}, false
	}
	defer s.leave()
	var first time.Time
	err := s.db.View(func(txn *bdb.Txn) error {
		for _, st := range []runstate.RunStatus{runstate.StatusQueued, runstate.StatusWaiting} {
			prefix := layout.Parked(st)
			err := scanKeys(txn, prefix, append(slices.Clone(prefix), kvindex.Micros(after.Add(time.Microsecond))...), func(k []byte) (bool, error) {
				if at := kvindex.ParseMicros(k[len(prefix) : len(prefix)+8]); first.IsZero() || at.Before(first) {
					first = at
				}
				return false, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("reading the next wake time of the parked runs; watchers are woken by writes and polls only", "error", err)
		return time.Time{}, false
	}
	return first, !first.IsZero()
}

// WatchRunnable implements runstate.RunnableWatcher: a commit that made a
// run claimable without a lease (created, released, woken, moved back to
// a claimable status) wakes every watcher, and so does a parked run when it
// comes due (the store keeps an alarm for the earliest).
func (s *Store) WatchRunnable(ctx context.Context, p runstate.WatchRunnableParams) (<-chan struct{}, error) {
	return s.data.runnable.WatchRunnable(ctx, p)
}

// Close stops garbage collection and closes the database; later calls
// return runstate.ErrUnavailable. Close waits for calls in progress.
func (s *Store) Close() error { return s.data.close() }

func (s *storage) close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.notices.Close()
	s.runnable.Close()
	if s.stopGC != nil {
		close(s.stopGC)
		<-s.gcDone
	}
	return interpretError(s.db.Close())
}

// enter admits an operation after checking its context (CTX-001); the
// caller must call s.leave.
func (s *storage) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return runstate.Unavailable("badger store "+s.dir+" is closed", nil)
	}
	return nil
}

func (s *storage) leave() { s.closeMu.RUnlock() }

func (s *storage) now() time.Time { return driver.Timestamp(s.clock.Now()) }

// update runs fn in a read-write transaction, retrying Badger conflicts
// with a short jittered backoff. fn runs afresh on every attempt, so of
// writers racing from one version exactly one wins (CAS-003), and each call
// takes effect atomically at its commit (LIN-001, LIN-002).
func (s *storage) update(ctx context.Context, fn func(t *tx) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	t := &tx{head: &s.head}
	defer t.done()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.written, t.runnable, t.parked = t.written[:0], false, time.Time{}
		err := s.db.Update(func(txn *bdb.Txn) error {
			t.Txn = txn
			return fn(t)
		})
		if err == nil {
			s.notices.Notify(t.written...)
			if t.runnable {
				s.runnable.Notify()
			}
			if !t.parked.IsZero() {
				s.runnable.Parked(t.parked)
			}
		}
		if !errors.Is(err, bdb.ErrConflict) || attempt == maxConflictRetries {
			return interpretError(err)
		}
		time.Sleep(time.Duration(rand.IntN(100*(min(attempt, 10)+1))) * time.Microsecond)
	}
}

// view runs fn in a read-only transaction: one consistent snapshot.
func (s *storage) view(ctx context.Context, fn func(txn *bdb.Txn) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return interpretError(s.db.View(fn))
}

func (s *storage) gcLoop(interval time.Duration) {
	defer close(s.gcDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopGC:
			return
		case <-t.C:
			s.collectGarbage()
		}
	}
}

// collectGarbage rewrites value-log files until none is worth rewriting.
func (s *storage) collectGarbage() {
	for rewrites := 0; ; rewrites++ {
		select {
		case <-s.stopGC:
			return
		default:
		}
		err := s.db.RunValueLogGC(gcDiscardRatio)
		if err != nil {
			if !errors.Is(err, bdb.ErrNoRewrite) && !errors.Is(err, bdb.ErrRejected) {
				s.log.Warn("runstate badger value-log GC failed", "dir", s.dir, "error", err)
			} else if rewrites > 0 {
				s.log.Debug("runstate badger value-log GC", "dir", s.dir, "files_rewritten", rewrites)
			}
			return
		}
	}
}

// RunValueLogGC runs one value-log garbage collection pass now, for callers
// that disabled the periodic one. It reports how many files were rewritten.
func (s *Store) RunValueLogGC(ctx context.Context) (int, error) { return s.data.runValueLogGC(ctx) }

func (s *storage) runValueLogGC(ctx context.Context) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	n := 0
	for ; ctx.Err() == nil; n++ {
		err := s.db.RunValueLogGC(gcDiscardRatio)
		if errors.Is(err, bdb.ErrNoRewrite) {
			return n, nil
		}
		if err != nil {
			return n, interpretError(err)
		}
	}
	return n, ctx.Err()
}

// interpretError maps Badger's errors to the contract's, in one place.
// Errors that are already the contract's, or a context's, pass unchanged.
func interpretError(err error) error {
	switch {
	case err == nil, runstate.CodeOf(err) != "", errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, bdb.ErrDBClosed), errors.Is(err, bdb.ErrBlockedWrites):
		return runstate.Unavailable("badger store is closed", err)
	case errors.Is(err, bdb.ErrConflict):
		return runstate.Unavailable(fmt.Sprintf("badger transaction kept conflicting after %d retries; try again", maxConflictRetries), err)
	}
	return runstate.Unavailable("badger store failed", err)
}

// ErrDirectoryInUse is the cause of the runstate.ErrUnavailable that Open
// returns when another process has the directory open.
var ErrDirectoryInUse = errors.New("the badger directory is in use by another process")

// interpretOpenError explains why a directory could not be opened.
func interpretOpenError(dir string, err error) error {
	if errors.Is(err, syscall.EWOULDBLOCK) || directoryLocked(dir) {
		return runstate.Unavailable(fmt.Sprintf("badger directory %s is in use by another process; one process at a time may open it", dir),
			fmt.Errorf("%w: %v", ErrDirectoryInUse, err))
	}
	return runstate.Unavailable(fmt.Sprintf("cannot open badger directory %s", dir), err)
}

// badgerLogger sends Badger's log lines to slog.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
func (b badgerLogger) Infof(f string, a ...any) {
	b.l.Info(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
func (b badgerLogger) Debugf(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
