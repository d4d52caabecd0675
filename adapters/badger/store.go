package badger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/kvindex"
	"github.com/runstate/runstate/driver"
)

// storedRun is the value under a run key: the snapshot and the sequence
// number of the run's last audit event, so that appending needs no scan.
type storedRun struct {
	Run     runstate.RunSnapshot `json:"run"`
	LastSeq int64                `json:"last_seq"`
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
	ok, err := getJSON(txn, layout.Run(id), &r)
	return r, ok, err
}

// mustGetRun reads a run an index points at; a dangling index key means
// the directory is damaged.
func mustGetRun(txn reader, id string) (storedRun, error) {
	r, ok, err := getRun(txn, id)
	if err == nil && !ok {
		err = runstate.Unavailable(fmt.Sprintf("badger index names run %s, which is missing: the directory is damaged", id), nil)
	}
	return r, err
}

func getLease(txn reader, id string) (driver.LeaseState, error) {
	var l driver.LeaseState
	_, err := getJSON(txn, layout.Lease(id), &l)
	return l, err
}

// moveIndexes moves a run's index keys from old (nil: a new run) to new.
func moveIndexes(txn *tx, old *kvindex.Indexed, new kvindex.Indexed) error {
	del, set := layout.IndexChanges(old, new)
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

// write stores change c of the run read as cur with lease, its index
// changes and its events, in one transaction (AUD-005).
func write(txn *tx, cur storedRun, lease driver.LeaseState, c driver.Change) error {
	if c.Empty() {
		return nil
	}
	next, nextLease := cur, lease
	if c.Run != nil {
		next.Run = *c.Run
	}
	if c.Lease != nil {
		nextLease = *c.Lease
	}
	txn.written = append(txn.written, next.Run.RunID)
	before, after := driver.Placed{Run: cur.Run, Lease: lease}, driver.Placed{Run: next.Run, Lease: nextLease}
	txn.runnable = txn.runnable || driver.BecameClaimable(&before, after)
	if wake, ok := driver.ParkedUntil(&before, after); ok && (txn.parked.IsZero() || wake.Before(txn.parked)) {
		txn.parked = wake
	}
	if err := moveIndexes(txn, &kvindex.Indexed{Run: cur.Run, Lease: lease}, kvindex.Indexed{Run: next.Run, Lease: nextLease}); err != nil {
		return err
	}
	if err := appendEvents(txn, c.Events, &next.LastSeq); err != nil {
		return err
	}
	if c.Lease != nil {
		if err := setJSON(txn, layout.Lease(next.Run.RunID), nextLease); err != nil {
			return err
		}
	}
	if c.Run == nil && len(c.Events) == 0 {
		return nil
	}
	return setJSON(txn, layout.Run(next.Run.RunID), next)
}

// appendEvents stores numbered events and moves *lastSeq to the last one's.
func appendEvents(txn *tx, events []runstate.AuditEvent, lastSeq *int64) error {
	for _, ev := range events {
		if err := setJSON(txn, layout.Audit(ev.RunID, ev.Seq), ev); err != nil {
			return err
		}
		*lastSeq = ev.Seq
	}
	return nil
}

// Now implements driver.Driver.
func (s *storage) Now(context.Context) (time.Time, error) { return s.now(), nil }

// Keeps implements driver.Keeper: parked runs are indexed by wake time
// beside the unleased queue.
func (s *storage) Keeps() driver.Keeps { return driver.Keeps{Parking: true} }

// Insert implements driver.Driver.
func (s *storage) Insert(ctx context.Context, r driver.InsertParams) error {
	return s.update(ctx, func(txn *tx) error { return insert(txn, r) })
}

// insert stores a new run with its indexes and created event.
func insert(txn *tx, r driver.InsertParams) error {
	if _, exists, err := getRun(txn, r.Run.RunID); err != nil || exists {
		if exists {
			return runstate.ErrAlreadyExists
		}
		return err
	}
	next := storedRun{Run: r.Run}
	txn.written = append(txn.written, r.Run.RunID)
	txn.runnable = txn.runnable || driver.BecameClaimable(nil, driver.Placed{Run: r.Run})
	if err := moveIndexes(txn, nil, kvindex.Indexed{Run: r.Run}); err != nil {
		return err
	}
	if err := appendEvents(txn, []runstate.AuditEvent{r.Created}, &next.LastSeq); err != nil {
		return err
	}
	return setJSON(txn, layout.Run(r.Run.RunID), next)
}

// current reads run id with its lease for a write; runstate.ErrNotFound when missing.
func (s *storage) current(txn *tx, id string) (storedRun, driver.LeaseState, error) {
	r, ok, err := getRun(txn, id)
	if err == nil && !ok {
		err = runstate.ErrNotFound
	}
	if err != nil {
		return r, driver.LeaseState{}, err
	}
	l, err := getLease(txn, id)
	return r, l, err
}

// Modify implements driver.Driver, holding the run's lock across Badger's
// conflict retries (see runLocks).
func (s *storage) Modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	return s.updateRun(ctx, runID, func(txn *tx) error {
		cur, lease, err := s.current(txn, runID)
		if err != nil {
			return err
		}
		return write(txn, cur, lease, change(driver.Current{Run: cur.Run, Lease: lease, LastSeq: cur.LastSeq, Now: s.now()}))
	})
}

// Get implements driver.Driver.
func (s *storage) Get(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	var out storedRun
	err := s.view(ctx, func(txn *bdb.Txn) error {
		r, ok, err := getRun(txn, runID)
		if err == nil && !ok {
			err = runstate.ErrNotFound
		}
		out = r
		return err
	})
	return out.Run, err
}

// ListRuns implements driver.Driver. It walks the most selective index
// the filter allows (status, else workflow, else a label, else all runs by
// creation), from the cursor on, and stops once it has q.Limit runs.
func (s *storage) ListRuns(ctx context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	var found []runstate.RunSnapshot
	err := s.view(ctx, func(txn *bdb.Txn) error {
		for _, prefix := range layout.ListPrefixes(q.Filter) {
			runs, err := scanCreated(txn, prefix, q)
			if err != nil {
				return err
			}
			found = append(found, runs...)
		}
		return nil
	})
	// Several indexes merge in (created_at, run_id) order (LIST-005).
	slices.SortFunc(found, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
	return found[:min(len(found), q.Limit)], err
}

// scanCreated returns up to q.Limit runs matching q from one index whose
// keys are prefix, created, run_id.
func scanCreated(txn *bdb.Txn, prefix []byte, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	seek := prefix
	if q.After != nil {
		seek = kvindex.RunPosAfter(prefix, *q.After)
	}
	if !q.Filter.CreatedFrom.IsZero() {
		if from := append(slices.Clone(prefix), kvindex.Micros(q.Filter.CreatedFrom)...); bytes.Compare(from, seek) > 0 {
			seek = from
		}
	}
	var out []runstate.RunSnapshot
	err := scanKeys(txn, prefix, seek, func(k []byte) (bool, error) {
		if created := kvindex.ParseMicros(k[len(prefix) : len(prefix)+8]); !q.Filter.CreatedBefore.IsZero() && !created.Before(q.Filter.CreatedBefore) {
			return false, nil
		}
		r, err := mustGetRun(txn, kvindex.RunIDOf(k, len(prefix)+8))
		if err != nil {
			return false, err
		}
		if q.Filter.Matches(r.Run) {
			out = append(out, r.Run)
		}
		return len(out) < q.Limit, nil
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

// ListAudit implements driver.Driver.
func (s *storage) ListAudit(ctx context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	var events []runstate.AuditEvent
	err := s.view(ctx, func(txn *bdb.Txn) error {
		if _, ok, err := getRun(txn, q.RunID); err != nil || !ok {
			if err == nil {
				err = runstate.ErrNotFound
			}
			return err
		}
		it := txn.NewIterator(bdb.IteratorOptions{Prefix: layout.AuditPrefix(q.RunID), PrefetchValues: true, PrefetchSize: min(q.Limit, 100)})
		defer it.Close()
		// Seq order from after_seq on, without gaps or repeats (AUD-006).
		for it.Seek(layout.Audit(q.RunID, q.AfterSeq+1)); it.Valid() && len(events) < q.Limit; it.Next() {
			var ev runstate.AuditEvent
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &ev) }); err != nil {
				return err
			}
			events = append(events, ev)
		}
		return nil
	})
	return events, err
}
