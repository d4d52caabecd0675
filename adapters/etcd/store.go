package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// storedRun is the value under a run key: the snapshot, the lease and the
// sequence number of the run's last audit event, so that a run is one key
// and one compared revision.
type storedRun struct {
	Run     runstate.RunSnapshot `json:"run"`
	Lease   driver.LeaseState    `json:"lease"`
	LastSeq int64                `json:"last_seq"`
}

// record is a run as read: its value and the mod revision a write of it
// compares.
type record struct {
	storedRun
	modRev int64
}

func (r record) current(now time.Time) driver.Current {
	return driver.Current{Run: r.Run, Lease: r.Lease, LastSeq: r.LastSeq, Now: now}
}

func decodeRun(v []byte, modRev int64) (record, error) {
	r := record{modRev: modRev}
	if err := json.Unmarshal(v, &r.storedRun); err != nil {
		return r, runstate.Unavailable("a stored run cannot be decoded: the keys are damaged", err)
	}
	return r, nil
}

// writeOps returns the operations that store change c of the run read as
// old (nil: a new run, whose created event is in c.Events): the run key,
// its index moves and its events (AUD-005). ok is false for an empty change.
func (s *storage) writeOps(old *storedRun, base storedRun, c driver.Change) (ops []clientv3.Op, ok bool, err error) {
	if old != nil && c.Empty() {
		return nil, false, nil
	}
	next := base
	if c.Run != nil {
		next.Run = *c.Run
	}
	if c.Lease != nil {
		next.Lease = *c.Lease
	}
	del, put := s.k.indexChanges(old, next)
	for _, k := range del {
		ops = append(ops, clientv3.OpDelete(k))
	}
	for _, k := range put {
		ops = append(ops, clientv3.OpPut(k, ""))
	}
	for _, ev := range c.Events {
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, false, err
		}
		ops = append(ops, clientv3.OpPut(s.k.audit(ev.RunID, ev.Seq), string(b)))
		next.LastSeq = ev.Seq
	}
	b, err := json.Marshal(next)
	if err != nil {
		return nil, false, err
	}
	return append(ops, clientv3.OpPut(s.k.run(next.Run.RunID), string(b))), true, nil
}

// insertOps returns the operations that store a new run and the
// comparison that it does not exist.
func (s *storage) insertOps(r driver.InsertParams) (clientv3.Cmp, []clientv3.Op, error) {
	ops, _, err := s.writeOps(nil, storedRun{Run: r.Run}, driver.Change{Events: []runstate.AuditEvent{r.Created}})
	return clientv3.Compare(clientv3.CreateRevision(s.k.run(r.Run.RunID)), "=", 0), ops, err
}

// Insert implements driver.Driver.
func (s *storage) Insert(ctx context.Context, r driver.InsertParams) error {
	cmp, ops, err := s.insertOps(r)
	if err != nil {
		return err
	}
	return s.retry(ctx, func() error {
		_, err := s.commit(ctx, []clientv3.Cmp{cmp}, ops)
		if errors.Is(err, errConflict) {
			return runstate.ErrAlreadyExists // runs are never deleted: this one exists
		}
		return err
	})
}

// getRun reads one run (linearizable); found is false when it is missing.
func (s *storage) getRun(ctx context.Context, id string) (r record, found bool, err error) {
	resp, err := s.cli.Get(ctx, s.k.run(id))
	if err != nil || len(resp.Kvs) == 0 {
		return r, false, err
	}
	r, err = decodeRun(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	return r, err == nil, err
}

// Modify implements driver.Driver: read the run, decide, and commit if the
// run's revision has not moved since; else decide again on the run as the
// failed commit read it.
func (s *storage) Modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	var cur *record
	return s.retry(ctx, func() error {
		if cur == nil {
			r, found, err := s.getRun(ctx, runID)
			if err != nil {
				return err
			}
			if !found {
				return runstate.ErrNotFound
			}
			cur = &r
		}
		ops, ok, err := s.writeOps(&cur.storedRun, cur.storedRun, change(cur.current(s.now())))
		if err != nil || !ok {
			return err
		}
		fresh, err := s.commit(ctx, []clientv3.Cmp{s.unchanged(*cur)}, ops, runID)
		if errors.Is(err, errConflict) {
			cur = fresh[0] // nil (missing) cannot be: runs are never deleted
		}
		return err
	})
}

// unchanged compares a run's revision with the one it was read at.
func (s *storage) unchanged(r record) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(s.k.run(r.Run.RunID)), "=", r.modRev)
}

// Get implements driver.Driver.
func (s *storage) Get(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	var out runstate.RunSnapshot
	err := s.read(ctx, func() error {
		r, found, err := s.getRun(ctx, runID)
		if err == nil && !found {
			err = runstate.ErrNotFound
		}
		out = r.Run
		return err
	})
	return out, err
}

// snapshot is a consistent read of several requests: the first fixes the
// revision, and the others read at it.
type snapshot struct {
	s   *storage
	ctx context.Context
	rev int64
}

// keysIn returns up to limit keys in [from, end), in key order (limit 0:
// all of them).
func (r *snapshot) keysIn(from, end string, limit int) ([]string, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit))}
	if r.rev > 0 {
		opts = append(opts, clientv3.WithRev(r.rev))
	}
	resp, err := r.s.cli.Get(r.ctx, from, opts...)
	if err != nil {
		return nil, err
	}
	if r.rev == 0 {
		r.rev = resp.Header.Revision
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Key)
	}
	return out, nil
}

// runs reads the runs ids name, at the snapshot's revision. An index
// that names a missing run means the keys are damaged.
func (r *snapshot) runs(ids []string) ([]record, error) {
	found, err := r.lookup(ids)
	if err != nil {
		return nil, err
	}
	out := make([]record, len(ids))
	for i, rec := range found {
		if rec == nil {
			return nil, runstate.Unavailable(fmt.Sprintf("%s: an index names run %s, which is missing: the keys are damaged", r.s.where, ids[i]), nil)
		}
		out[i] = *rec
	}
	return out, nil
}

// lookup reads the runs ids name, at the snapshot's revision, in as few
// transactions as MaxTxnOps allows; a missing run is nil.
func (r *snapshot) lookup(ids []string) ([]*record, error) {
	out := make([]*record, 0, len(ids))
	for chunk := range slices.Chunk(ids, r.s.maxTxnOps) {
		ops := make([]clientv3.Op, len(chunk))
		for i, id := range chunk {
			opts := []clientv3.OpOption{}
			if r.rev > 0 {
				opts = append(opts, clientv3.WithRev(r.rev))
			}
			ops[i] = clientv3.OpGet(r.s.k.run(id), opts...)
		}
		resp, err := r.s.cli.Txn(r.ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		if r.rev == 0 {
			r.rev = resp.Header.Revision
		}
		for _, res := range resp.Responses {
			kvs := res.GetResponseRange().Kvs
			if len(kvs) == 0 {
				out = append(out, nil)
				continue
			}
			rec, err := decodeRun(kvs[0].Value, kvs[0].ModRevision)
			if err != nil {
				return nil, err
			}
			out = append(out, &rec)
		}
	}
	return out, nil
}

// walk visits the runs that the index keys in [from, end) name, a page
// of keys at a time, in key order, until visit says stop. id cuts the run
// id out of an index key.
func (r *snapshot) walk(from, end string, page int, id func(key string) string, visit func(record) bool) error {
	page = min(max(page, 1), r.s.maxTxnOps)
	for {
		ks, err := r.keysIn(from, end, page)
		if err != nil {
			return err
		}
		ids := make([]string, len(ks))
		for i, k := range ks {
			ids[i] = id(k)
		}
		recs, err := r.runs(ids)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if !visit(rec) {
				return nil
			}
		}
		if len(ks) < page {
			return nil
		}
		from = ks[len(ks)-1] + "\x00"
	}
}

// indexRange is one range of index keys a search walks: the keys in
// [from, end), page at a time, each naming a run (idOf) that visit is
// offered, in key order, until it says stop.
type indexRange struct {
	from, end string
	page      int
	idOf      func(key string) string
	visit     func(record) bool
}

// walkAll walks ranges at the snapshot's revision: the first page of
// every range in one transaction and their runs in another, so that a
// search of several indexes costs two round trips; a range whose visit
// wants more than its first page walks on alone.
func (r *snapshot) walkAll(ranges []indexRange) error {
	ops := make([]clientv3.Op, len(ranges))
	for i, g := range ranges {
		g.page = min(max(g.page, 1), r.s.maxTxnOps)
		ranges[i] = g
		opts := []clientv3.OpOption{clientv3.WithRange(g.end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(g.page))}
		if r.rev > 0 {
			opts = append(opts, clientv3.WithRev(r.rev))
		}
		ops[i] = clientv3.OpGet(g.from, opts...)
	}
	resp, err := r.s.cli.Txn(r.ctx).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if r.rev == 0 {
		r.rev = resp.Header.Revision
	}
	pages := make([][]string, len(ranges))
	var ids []string
	for i, res := range resp.Responses {
		for _, kv := range res.GetResponseRange().Kvs {
			k := string(kv.Key)
			pages[i] = append(pages[i], k)
			if id := ranges[i].idOf(k); !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	recs, err := r.runs(ids)
	if err != nil {
		return err
	}
	byID := make(map[string]record, len(recs))
	for _, rec := range recs {
		byID[rec.Run.RunID] = rec
	}
	for i, g := range ranges {
		more := true
		for _, k := range pages[i] {
			if more = g.visit(byID[g.idOf(k)]); !more {
				break
			}
		}
		if more && len(pages[i]) == g.page {
			if err := r.walk(pages[i][len(pages[i])-1]+"\x00", g.end, g.page, g.idOf, g.visit); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListRuns implements driver.Driver. It walks the most selective index
// the filter allows (status, else workflow, else a label, else all runs by
// creation), from the cursor on, at one revision, and stops once it has
// q.Limit runs.
func (s *storage) ListRuns(ctx context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	var found []runstate.RunSnapshot
	err := s.read(ctx, func() error {
		found = nil
		snap := &snapshot{s: s, ctx: ctx}
		for _, prefix := range s.k.listPrefixes(q.Filter) {
			if err := s.listFrom(snap, prefix, q, &found); err != nil {
				return err
			}
		}
		return nil
	})
	// Several indexes merge in (created_at, run_id) order (LIST-005).
	slices.SortFunc(found, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
	return found[:min(len(found), q.Limit)], err
}

// listFrom appends to found up to q.Limit runs matching q from one index
// whose keys are prefix, created, run_id.
func (s *storage) listFrom(snap *snapshot, prefix string, q driver.RunQuery, found *[]runstate.RunSnapshot) error {
	from := prefix
	if q.After != nil {
		from = runPosAfter(prefix, *q.After)
	}
	if !q.Filter.CreatedFrom.IsZero() {
		if f := prefix + micros(q.Filter.CreatedFrom); f > from {
			from = f
		}
	}
	end := prefixEnd(prefix)
	if !q.Filter.CreatedBefore.IsZero() {
		end = prefix + micros(q.Filter.CreatedBefore)
	}
	if from >= end {
		return nil
	}
	taken := 0
	return snap.walk(from, end, q.Limit, func(k string) string { return k[len(prefix)+8:] }, func(r record) bool {
		if q.Filter.Matches(r.Run) {
			*found = append(*found, r.Run)
			taken++
		}
		return taken < q.Limit
	})
}

// ListAudit implements driver.Driver: the run and its events after
// q.AfterSeq, in one transaction, so at one revision.
func (s *storage) ListAudit(ctx context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	var events []runstate.AuditEvent
	err := s.read(ctx, func() error {
		events = nil
		// Seq order from after_seq on, without gaps or repeats (AUD-006).
		resp, err := s.cli.Txn(ctx).Then(
			clientv3.OpGet(s.k.run(q.RunID), clientv3.WithCountOnly()),
			clientv3.OpGet(s.k.audit(q.RunID, q.AfterSeq+1), clientv3.WithRange(prefixEnd(s.k.auditPrefix(q.RunID))), clientv3.WithLimit(int64(q.Limit))),
		).Commit()
		if err != nil {
			return err
		}
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return runstate.ErrNotFound
		}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			var ev runstate.AuditEvent
			if err := json.Unmarshal(kv.Value, &ev); err != nil {
				return runstate.Unavailable("a stored audit event cannot be decoded: the keys are damaged", err)
			}
			events = append(events, ev)
		}
		return nil
	})
	return events, err
}
