// Package filestore is a runstate store kept in one JSON file, written the
// way a third party writes a store: it depends on runstate only through its
// public packages, lets package spec decide every rule, and only loads and
// saves. Every change rewrites the file atomically (write, fsync, rename).
// It suits a single process with modest history; it is an example.
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

	"github.com/runstate/runstate/spec"
)

var _ spec.Store = (*Store)(nil)

type record struct {
	Run    spec.RunSnapshot  `json:"run"`
	Events []spec.AuditEvent `json:"events"`
	Lease  spec.LeaseState   `json:"lease"`
}

// Store is a store in one JSON file.
type Store struct {
	path string
	mu   sync.Mutex
	runs map[string]*record
}

// Open loads the store at path, creating an empty one when missing.
func Open(path string) (*Store, error) {
	s := &Store{path: path, runs: map[string]*record{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, spec.Unavailable("reading "+path, err)
	}
	if err := json.Unmarshal(b, &s.runs); err != nil {
		return nil, spec.Unavailable(path+" is not a filestore", err)
	}
	return s, nil
}

// save writes every run to a temporary file and renames it into place.
func (s *Store) save() error {
	b, err := json.Marshal(s.runs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".filestore-*")
	if err != nil {
		return spec.Unavailable("writing "+s.path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return spec.Unavailable("writing "+s.path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return spec.Unavailable("writing "+s.path, err)
	}
	if err := tmp.Close(); err != nil {
		return spec.Unavailable("writing "+s.path, err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return spec.Unavailable("writing "+s.path, err)
	}
	return nil
}

// change runs fn under the lock and saves when fn reports a change. A
// failed save restores the runs as they were, so memory matches the file.
func (s *Store) change(ctx context.Context, fn func() (changed bool, err error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	before, err := json.Marshal(s.runs)
	if err != nil {
		return err
	}
	changed, fnErr := fn()
	if !changed {
		return fnErr
	}
	if err := s.save(); err != nil {
		s.runs = map[string]*record{}
		json.Unmarshal(before, &s.runs)
		return err
	}
	return fnErr
}

func (s *Store) read(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn()
}

func now() time.Time { return spec.Timestamp(time.Now()) }

func (s *Store) CreateRun(ctx context.Context, p spec.CreateRunParams) (out spec.RunSnapshot, err error) {
	if err := spec.PrepareCreate(&p); err != nil {
		return out, err
	}
	err = s.change(ctx, func() (bool, error) {
		if _, ok := s.runs[p.RunID]; ok {
			return false, spec.AlreadyExists(p.RunID)
		}
		var retried *spec.RunSnapshot
		if r, ok := s.runs[p.RetryOf]; ok {
			retried = &r.Run
		}
		run, ev, err := spec.NewRun(p, retried, now())
		if err != nil {
			return false, err
		}
		s.runs[run.RunID] = &record{Run: run, Events: []spec.AuditEvent{ev}}
		out = run.Clone()
		return true, nil
	})
	return out, err
}

func (s *Store) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (out spec.RunSnapshot, err error) {
	if err := spec.PrepareUpdate(&p); err != nil {
		return out, err
	}
	err = s.change(ctx, func() (bool, error) {
		r, ok := s.runs[p.RunID]
		if !ok {
			return false, spec.NotFound(p.RunID)
		}
		o := spec.ApplyUpdate(r.Run, r.Lease, p, now())
		if o.Write {
			r.Run = o.Snapshot
		}
		for _, ev := range o.Events {
			ev.Seq = int64(len(r.Events)) + 1
			r.Events = append(r.Events, ev)
		}
		run, err := o.Result()
		out = run.Clone()
		return o.Write || len(o.Events) > 0, err
	})
	return out, err
}

func (s *Store) GetRun(ctx context.Context, id string) (out spec.RunSnapshot, err error) {
	if err := spec.PrepareGet(id); err != nil {
		return out, err
	}
	err = s.read(ctx, func() error {
		r, ok := s.runs[id]
		if !ok {
			return spec.NotFound(id)
		}
		out = r.Run.Clone()
		return nil
	})
	return out, err
}

func (s *Store) ListRuns(ctx context.Context, p spec.ListRunsParams) (page spec.RunPage, err error) {
	q, err := spec.PrepareListRuns(p)
	if err != nil {
		return page, err
	}
	err = s.read(ctx, func() error {
		var all []spec.RunSnapshot
		for _, r := range s.runs {
			if q.Filter.Matches(r.Run) && (q.After == nil || q.After.Less(spec.PositionOf(r.Run))) {
				all = append(all, r.Run.Clone())
			}
		}
		slices.SortFunc(all, func(a, b spec.RunSnapshot) int { return spec.PositionOf(a).Compare(spec.PositionOf(b)) })
		if len(all) > q.Limit {
			all = all[:q.Limit]
			page.NextCursor = spec.PositionOf(all[q.Limit-1]).Cursor()
		}
		page.Runs = all
		return nil
	})
	return page, err
}

func (s *Store) ListAuditEvents(ctx context.Context, p spec.ListAuditParams) (page spec.AuditPage, err error) {
	limit, err := spec.PrepareAuditQuery(p)
	if err != nil {
		return page, err
	}
	err = s.read(ctx, func() error {
		r, ok := s.runs[p.RunID]
		if !ok {
			return spec.NotFound(p.RunID)
		}
		evs := r.Events[min(int(p.AfterSeq), len(r.Events)):]
		page.More = len(evs) > limit
		page.Events = slices.Clone(evs[:min(len(evs), limit)])
		return nil
	})
	return page, err
}

func (s *Store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (c spec.Claim, err error) {
	pc, err := spec.PrepareClaimRun(p)
	if err != nil {
		return c, err
	}
	err = s.change(ctx, func() (bool, error) {
		r, ok := s.runs[pc.RunID]
		if !ok {
			return false, spec.NotFound(pc.RunID)
		}
		c, err = s.claim(r, pc)
		return err == nil, err
	})
	return c, err
}

func (s *Store) claim(r *record, pc spec.PreparedClaim) (spec.Claim, error) {
	l, err := r.Lease.Claim(r.Run, pc.Owner, pc.TTL, pc.Statuses, now())
	if err != nil {
		return spec.Claim{}, err
	}
	r.Lease = l
	return spec.Claim{Lease: l.Lease(r.Run.RunID), Run: r.Run.Clone()}, nil
}

func (s *Store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (c spec.Claim, err error) {
	q, err := spec.PrepareClaimNext(p)
	if err != nil {
		return c, err
	}
	err = s.change(ctx, func() (bool, error) {
		var best *record
		t := now()
		for _, r := range s.runs {
			if q.ClaimableBy(r.Run, r.Lease, p.Owner, t) &&
				(best == nil || spec.RunnablePositionOf(r.Run).Less(spec.RunnablePositionOf(best.Run))) {
				best = r
			}
		}
		if best == nil {
			return false, &spec.Error{Code: spec.CodeNotFound, Message: "no runnable run matches the filter"}
		}
		c, err = s.claim(best, spec.PreparedClaim{RunID: best.Run.RunID, Owner: p.Owner, TTL: p.TTL, Statuses: q.Statuses})
		return err == nil, err
	})
	return c, err
}

func (s *Store) RenewLease(ctx context.Context, p spec.RenewLeaseParams) (l spec.Lease, err error) {
	if err := spec.PrepareRenew(p); err != nil {
		return l, err
	}
	err = s.change(ctx, func() (bool, error) {
		r, ok := s.runs[p.RunID]
		if !ok {
			return false, spec.NotFound(p.RunID)
		}
		next, err := r.Lease.Renew(p.RunID, p.Token, p.TTL, now())
		if err != nil {
			return false, err
		}
		r.Lease, l = next, next.Lease(p.RunID)
		return true, nil
	})
	return l, err
}

func (s *Store) ReleaseLease(ctx context.Context, p spec.ReleaseLeaseParams) error {
	if err := spec.PrepareRelease(p); err != nil {
		return err
	}
	return s.change(ctx, func() (bool, error) {
		r, ok := s.runs[p.RunID]
		if !ok {
			return false, spec.NotFound(p.RunID)
		}
		next, err := r.Lease.Release(p.RunID, p.Token)
		if err != nil {
			return false, err
		}
		r.Lease = next
		return true, nil
	})
}

func (s *Store) ListRunnableRuns(ctx context.Context, p spec.ListRunnableParams) (page spec.RunPage, err error) {
	q, err := spec.PrepareRunnable(p.Filter, p.Limit, p.Cursor)
	if err != nil {
		return page, err
	}
	err = s.read(ctx, func() error {
		t := now()
		var all []spec.RunSnapshot
		for _, r := range s.runs {
			if q.Runnable(r.Run, r.Lease, t) && (q.After == nil || q.After.Less(spec.RunnablePositionOf(r.Run))) {
				all = append(all, r.Run.Clone())
			}
		}
		slices.SortFunc(all, func(a, b spec.RunSnapshot) int {
			return spec.RunnablePositionOf(a).Compare(spec.RunnablePositionOf(b))
		})
		if len(all) > q.Limit {
			all = all[:q.Limit]
			page.NextCursor = spec.RunnablePositionOf(all[q.Limit-1]).Cursor()
		}
		page.Runs = all
		return nil
	})
	return page, err
}
