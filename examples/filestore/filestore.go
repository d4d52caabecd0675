// Package filestore is a runstate store kept in one JSON file, written the
// way a third party writes a store: it implements runstate's driver.Driver
// (load, change one run, save, search) and driver.Wrap does the rest. Every
// change rewrites the file atomically (write, fsync, rename). It suits a
// single process with modest history; it is an example.
package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Options say where the store keeps its file and which clock it reads.
type Options struct {
	// Path is the JSON file, created when missing.
	Path string
	// Clock stamps times and judges leases; nil reads the system clock. A
	// plugin passes plugin.TestClock(ctx), so that certification moves it.
	Clock runstate.Clock
}

// Open loads the store at opts.Path, creating an empty one when missing.
func Open(opts Options) (runstate.Store, error) {
	path := opts.Path
	f := &file{path: path, clock: opts.Clock, runs: map[string]*record{}}
	if f.clock == nil {
		f.clock = driver.SystemClock{}
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		if err := json.Unmarshal(b, &f.runs); err != nil {
			return nil, runstate.Unavailable(path+" is not a filestore", err)
		}
	}
	return driver.Wrap(f), nil
}

type record struct {
	Run    runstate.RunSnapshot  `json:"run"`
	Events []runstate.AuditEvent `json:"events"`
	Lease  driver.LeaseState     `json:"lease"`
}

// file holds every run in memory and in the file at path.
type file struct {
	path  string
	clock runstate.Clock
	mu    sync.Mutex
	runs  map[string]*record
}

var _ driver.Driver = (*file)(nil)

// save writes every run to a temporary file and renames it into place.
func (f *file) save() error {
	b, err := json.Marshal(f.runs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".filestore-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}

// write applies change under the lock and saves what it changed; when the
// save fails, the run is put back as it was, so memory matches the file.
func (f *file) write(id string, change func(r *record) (changed bool, err error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, had := f.runs[id]
	r := &record{}
	if had {
		next := *before
		r = &next
	}
	if changed, err := change(r); !changed || err != nil {
		return err
	}
	f.runs[id] = r
	if err := f.save(); err != nil {
		if f.runs[id] = before; !had {
			delete(f.runs, id)
		}
		return err
	}
	return nil
}

func (f *file) Now(context.Context) (time.Time, error) { return f.clock.Now(), nil }

// Keeps implements driver.Keeper: the runs are kept whole, wake time
// included, and Runnable judges them by RunnableQuery.Admits, which passes
// a parked run by until its wake time.
func (f *file) Keeps() driver.Keeps { return driver.Keeps{Parking: true} }

func (f *file) Insert(_ context.Context, n driver.InsertParams) error {
	return f.write(n.Run.RunID, func(r *record) (bool, error) {
		if r.Run.RunID != "" {
			return false, runstate.ErrAlreadyExists
		}
		*r = record{Run: n.Run.Clone(), Events: []runstate.AuditEvent{n.Created}}
		return true, nil
	})
}

func (f *file) Modify(_ context.Context, id string, change func(driver.Current) driver.Change) error {
	return f.write(id, func(r *record) (bool, error) {
		if r.Run.RunID == "" {
			return false, runstate.ErrNotFound
		}
		c := change(driver.Current{Run: r.Run, Lease: r.Lease, LastSeq: int64(len(r.Events)), Now: f.clock.Now()})
		if c.Run != nil {
			r.Run = c.Run.Clone()
		}
		if c.Lease != nil {
			r.Lease = *c.Lease
		}
		r.Events = append(slices.Clip(r.Events), c.Events...)
		return !c.Empty(), nil
	})
}

func (f *file) Get(_ context.Context, id string) (runstate.RunSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.runs[id]; ok {
		return r.Run.Clone(), nil
	}
	return runstate.RunSnapshot{}, runstate.ErrNotFound
}

func (f *file) ListAudit(_ context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[q.RunID]
	if !ok {
		return nil, runstate.ErrNotFound
	}
	events := r.Events[min(int(q.AfterSeq), len(r.Events)):]
	return slices.Clone(events[:min(len(events), q.Limit)]), nil
}

func (f *file) ListRuns(_ context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	return f.find(q.Limit, func(r *record) bool {
		return q.Filter.Matches(r.Run) && (q.After == nil || q.After.Less(driver.PositionOf(r.Run)))
	}, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
}

func (f *file) Runnable(_ context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	now := f.clock.Now()
	return f.find(q.Limit, func(r *record) bool {
		return q.Admits(r.Run, r.Lease, now) && (q.After == nil || q.After.Less(driver.RunnablePositionOf(r.Run)))
	}, func(a, b runstate.RunSnapshot) int {
		return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
	})
}

// find returns copies of the first limit runs that keep selects, in order.
func (f *file) find(limit int, keep func(*record) bool, order func(a, b runstate.RunSnapshot) int) ([]runstate.RunSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []runstate.RunSnapshot
	for _, r := range f.runs {
		if keep(r) {
			out = append(out, r.Run.Clone())
		}
	}
	slices.SortFunc(out, order)
	return out[:min(len(out), limit)], nil
}
