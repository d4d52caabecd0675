package badger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate/spec"
)

// storedRun is the value under a run key: the snapshot and the sequence
// number of the run's last audit event, so that appending needs no scan.
type storedRun struct {
	Run     spec.RunSnapshot `json:"run"`
	LastSeq int64            `json:"last_seq"`
}

// reader and writer are what the helpers need of *bdb.Txn (and *tx).
type reader interface {
	Get(key []byte) (*bdb.Item, error)
}

type writer interface {
	Set(key, val []byte) error
}

func getJSON(txn reader, k []byte, v any) (bool, error) {
	item, err := txn.Get(k)
	if errors.Is(err, bdb.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(func(b []byte) error { return json.Unmarshal(b, v) })
}

func setJSON(txn writer, k []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set(k, b)
}

func getRun(txn reader, id string) (storedRun, bool, error) {
	var r storedRun
	ok, err := getJSON(txn, runKey(id), &r)
	return r, ok, err
}

// mustGetRun reads a run an index points at; a dangling index key means
// the directory is damaged.
func mustGetRun(txn reader, id string) (storedRun, error) {
	r, ok, err := getRun(txn, id)
	if err == nil && !ok {
		err = spec.Unavailable(fmt.Sprintf("badger index names run %s, which is missing: the directory is damaged", id), nil)
	}
	return r, err
}

func getLease(txn reader, id string) (spec.LeaseState, error) {
	var l spec.LeaseState
	_, err := getJSON(txn, leaseKey(id), &l)
	return l, err
}

// moveIndexes moves a run's index keys from old (nil: a new run) to new.
func moveIndexes(txn *tx, old *indexed, new indexed) error {
	del, set := indexChanges(old, new)
	for _, k := range del {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	for _, k := range set {
		if err := txn.setIndex(k); err != nil {
			return err
		}
	}
	return nil
}

// writeRun stores next (old nil for a new run) with its index changes and
// appends events, numbering them after next.LastSeq, in the same
// transaction (AUD-002, AUD-005).
func writeRun(txn *tx, old *indexed, next storedRun, lease spec.LeaseState, events []spec.AuditEvent) error {
	if err := moveIndexes(txn, old, indexed{next.Run, lease}); err != nil {
		return err
	}
	for _, ev := range events {
		next.LastSeq++
		ev.Seq = next.LastSeq
		if err := setJSON(txn, auditKey(ev.RunID, ev.Seq), ev); err != nil {
			return err
		}
	}
	return setJSON(txn, runKey(next.Run.RunID), next)
}

// writeLease stores a run's new lease with its index changes.
func writeLease(txn *tx, run spec.RunSnapshot, old, new spec.LeaseState) error {
	if err := moveIndexes(txn, &indexed{run, old}, indexed{run, new}); err != nil {
		return err
	}
	return setJSON(txn, leaseKey(run.RunID), new)
}

// CreateRun implements spec.RunStateStore.
func (s *Store) CreateRun(ctx context.Context, p spec.CreateRunParams) (spec.RunSnapshot, error) {
	if err := spec.PrepareCreate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	var out spec.RunSnapshot
	err := s.update(ctx, func(txn *tx) error {
		if _, exists, err := getRun(txn, p.RunID); err != nil || exists {
			if exists { // RUN-003
				return spec.AlreadyExists(p.RunID)
			}
			return err
		}
		var retried *spec.RunSnapshot
		if p.RetryOf != "" {
			r, ok, err := getRun(txn, p.RetryOf)
			if err != nil {
				return err
			}
			if ok {
				retried = &r.Run
			}
		}
		snap, ev, err := spec.NewRun(p, retried, s.now())
		if err != nil {
			return err
		}
		out = snap
		return writeRun(txn, nil, storedRun{Run: snap}, spec.LeaseState{}, []spec.AuditEvent{ev})
	})
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return out, nil
}

// UpdateRun implements spec.RunStateStore.
func (s *Store) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (spec.RunSnapshot, error) {
	if err := spec.PrepareUpdate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	var out spec.UpdateOutcome
	err := s.updateRun(ctx, p.RunID, func(txn *tx) error {
		cur, ok, err := getRun(txn, p.RunID)
		if err != nil {
			return err
		}
		if !ok {
			return spec.NotFound(p.RunID)
		}
		lease, err := getLease(txn, p.RunID)
		if err != nil {
			return err
		}
		out = spec.ApplyUpdate(cur.Run, lease, p, s.now())
		if !out.Write && len(out.Events) == 0 {
			return nil
		}
		next := storedRun{Run: cur.Run, LastSeq: cur.LastSeq}
		if out.Write {
			next.Run = out.Snapshot
		}
		return writeRun(txn, &indexed{cur.Run, lease}, next, lease, out.Events)
	})
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return out.Result()
}

// GetRun implements spec.RunStateStore.
func (s *Store) GetRun(ctx context.Context, runID string) (spec.RunSnapshot, error) {
	if err := spec.PrepareGet(runID); err != nil {
		return spec.RunSnapshot{}, err
	}
	var out storedRun
	err := s.view(ctx, func(txn *bdb.Txn) error {
		r, ok, err := getRun(txn, runID)
		if err == nil && !ok { // RUN-004
			err = spec.NotFound(runID)
		}
		out = r
		return err
	})
	return out.Run, err
}

// ListRuns implements spec.RunStateStore. It walks the most selective index
// the filter allows (status, else workflow, else a label, else all runs by
// creation), from the cursor on, and stops once a page is full.
func (s *Store) ListRuns(ctx context.Context, p spec.ListRunsParams) (spec.RunPage, error) {
	q, err := spec.PrepareListRuns(p)
	if err != nil {
		return spec.RunPage{}, err
	}
	var page spec.RunPage
	err = s.view(ctx, func(txn *bdb.Txn) error {
		var found []spec.RunSnapshot
		for _, prefix := range listPrefixes(q.Filter) {
			runs, err := scanCreated(txn, prefix, q)
			if err != nil {
				return err
			}
			found = append(found, runs...)
		}
		// In (created_at, run_id) order; the last page has no cursor (LIST-005).
		slices.SortFunc(found, func(a, b spec.RunSnapshot) int { return spec.PositionOf(a).Compare(spec.PositionOf(b)) })
		if len(found) > q.Limit {
			found = found[:q.Limit]
			page.NextCursor = spec.PositionOf(found[len(found)-1]).Cursor()
		}
		page.Runs = found
		return nil
	})
	return page, err
}

// listPrefixes picks the index prefixes a filtered listing walks; each is
// ordered by (created, run_id) and the filter is applied to what they yield.
func listPrefixes(f spec.RunFilter) [][]byte {
	switch {
	case len(f.Statuses) > 0:
		var out [][]byte
		for _, st := range f.Statuses {
			if pre := statusPrefix(st); !slices.ContainsFunc(out, func(x []byte) bool { return bytes.Equal(x, pre) }) {
				out = append(out, pre)
			}
		}
		return out
	case f.WorkflowName != "":
		return [][]byte{workflowPrefix(f.WorkflowName)}
	case len(f.Labels) > 0:
		keys := make([]string, 0, len(f.Labels))
		for k := range f.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return [][]byte{labelPrefix(keys[0], f.Labels[keys[0]])}
	}
	return [][]byte{createdPrefix()}
}

// scanCreated returns up to q.Limit+1 runs matching q from one index whose
// keys are prefix, created, run_id.
func scanCreated(txn *bdb.Txn, prefix []byte, q spec.RunQuery) ([]spec.RunSnapshot, error) {
	seek := prefix
	if q.After != nil {
		seek = runPosAfter(prefix, *q.After)
	}
	if !q.Filter.CreatedFrom.IsZero() {
		if from := append(slices.Clone(prefix), micros(q.Filter.CreatedFrom)...); bytes.Compare(from, seek) > 0 {
			seek = from
		}
	}
	var out []spec.RunSnapshot
	err := scanKeys(txn, prefix, seek, func(k []byte) (bool, error) {
		if created := parseMicros(k[len(prefix) : len(prefix)+8]); !q.Filter.CreatedBefore.IsZero() && !created.Before(q.Filter.CreatedBefore) {
			return false, nil
		}
		r, err := mustGetRun(txn, runIDOf(k, len(prefix)+8))
		if err != nil {
			return false, err
		}
		if q.Filter.Matches(r.Run) {
			out = append(out, r.Run)
		}
		return len(out) <= q.Limit, nil
	})
	return out, err
}

// scanKeys visits the keys under prefix from seek on, in order, until visit
// says stop. Values are not read.
func scanKeys(txn *bdb.Txn, prefix, seek []byte, visit func(k []byte) (more bool, err error)) error {
	it := txn.NewIterator(bdb.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(seek); it.Valid(); it.Next() {
		more, err := visit(it.Item().KeyCopy(nil))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// ListAuditEvents implements spec.RunStateStore.
func (s *Store) ListAuditEvents(ctx context.Context, p spec.ListAuditParams) (spec.AuditPage, error) {
	limit, err := spec.PrepareAuditQuery(p)
	if err != nil {
		return spec.AuditPage{}, err
	}
	var page spec.AuditPage
	err = s.view(ctx, func(txn *bdb.Txn) error {
		if _, ok, err := getRun(txn, p.RunID); err != nil || !ok {
			if err == nil {
				err = spec.NotFound(p.RunID)
			}
			return err
		}
		it := txn.NewIterator(bdb.IteratorOptions{Prefix: auditPrefix(p.RunID), PrefetchValues: true, PrefetchSize: min(limit+1, 100)})
		defer it.Close()
		// Seq order from after_seq on, without gaps or repeats (AUD-006).
		for it.Seek(auditKey(p.RunID, p.AfterSeq+1)); it.Valid(); it.Next() {
			if len(page.Events) == limit {
				page.More = true
				return nil
			}
			var ev spec.AuditEvent
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &ev) }); err != nil {
				return err
			}
			page.Events = append(page.Events, ev)
		}
		return nil
	})
	return page, err
}
