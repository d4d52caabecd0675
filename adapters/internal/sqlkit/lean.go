package sqlkit

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Lean writes (Statements.Lean): a write is one statement, in a
// transaction of its own (PostgreSQL: data-modifying CTEs; MySQL: a call of
// a stored procedure), instead of BEGIN, a locking read, an INSERT of
// the events, an UPDATE and COMMIT.
//
// An update reads its rows without locking them, decides each Change on
// what it read, and then writes every row, with its events, in one
// statement that writes a row only where it is still the version that was
// read (the engine's row version: PostgreSQL's xmin, MySQL's row_version
// column, which every write of the row changes, lease-only ones included) and inserts the events of
// the rows it wrote. A row written meanwhile by another transaction is not
// written: it is read and decided again, and after leanAttempts such
// losses it goes the locking way, which always progresses. So a write is
// still decided on the row as committed just before it, with the database
// time read with the row, and of writers racing from one version exactly
// one wins (CAS-003, LEASE-002); its events commit with it (AUD-005).
//
// A write that changes a run's labels goes the locking way: rewriting
// them is two statements on one table, whose order one statement cannot
// fix.

// leanAttempts bounds the lean rounds of one write before the rows it
// lost to other writers go the locking way.
const leanAttempts = 3

// LeanStatements are the statements of lean writes. Each binds its rows as
// tables (Columns, readied by Dialect.LeanArgs), so its text is the same for
// one row or a thousand and the server prepares and plans it once per
// connection.
type LeanStatements struct {
	// ReadRuns reads runs' rows without locking them, with the database
	// time and each row's version as row_version (clock, run_ids).
	ReadRuns string
	// WriteRuns writes rows that are still at the version read, and the
	// events of the rows it wrote, and returns each row written: its
	// run_id, its new version as row_version, and the statement's
	// database time as now. Its arguments are leanRows.args: the rows as
	// Columns (run_id, workflow_name, status, priority, version, last_seq,
	// snapshot or "" to keep it, queue, lease_token, lease_worker,
	// lease_incarnation, lease_acquired_at, lease_expires_at,
	// lease_released, row_version, not_before), the events as Columns
	// (run_id, seq, event), and the clock parameter. A row whose
	// not_before is set (a known row's estimated time) is written only
	// where the database time is not earlier.
	WriteRuns string
	// InsertRuns inserts runs, their labels and their created events
	// (arguments: leanInserts.args), all or none: a run_id that exists
	// fails the statement, which then stores nothing. Its last argument,
	// a boolean, asks it to announce runnable runs as Dialect.OnRunnable
	// does, in the same statement: at its commit, never without it (a
	// dialect without announcements drops it in Dialect.LeanArgs).
	InsertRuns string
	// ClaimReadingMany is ClaimReading for up to (limit) runs of each
	// part: claim candidates read without locking.
	ClaimReadingMany string
}

// leanWay writes the lean way, and what lean writes leave the locking way.
type leanWay struct{ lockingWay }

// insert is Insert the lean way: one InsertRuns.
func (k leanWay) insert(ctx context.Context, r driver.InsertParams) error {
	return k.insertLean(ctx, []driver.InsertParams{r})
}

// insertMany is InsertMany the lean way: one InsertRuns, which stores
// nothing when a run_id exists; the item that collided is then looked up.
func (k leanWay) insertMany(ctx context.Context, runs []driver.InsertParams) error {
	err := k.insertLean(ctx, runs)
	if !errors.Is(err, runstate.ErrAlreadyExists) {
		return err
	}
	if i, findErr := k.existingIndex(ctx, runs); findErr != nil || i < 0 {
		return errors.Join(err, findErr)
	} else {
		return &runstate.BatchItemError{Index: i, Err: runstate.ErrAlreadyExists}
	}
}

// modify is Modify the lean way: modifyMany of one item.
func (k leanWay) modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	items := []driver.ModifyItem{{RunID: runID, Change: change}}
	if err := k.modifyMany(ctx, items); err != nil {
		return err
	}
	return items[0].Err
}

// modifyMany is ModifyMany the lean way (modifyLean), and the locking way
// for the items that lean writes leave.
func (k leanWay) modifyMany(ctx context.Context, items []driver.ModifyItem) error {
	rest, err := k.modifyLean(ctx, items)
	if err != nil || len(rest) == 0 {
		return err
	}
	locking := make([]driver.ModifyItem, len(rest))
	for i, at := range rest {
		locking[i] = driver.ModifyItem{RunID: items[at].RunID, Change: items[at].Change}
	}
	if err := k.lockingWay.modifyMany(ctx, locking); err != nil {
		// The lean writes of the other items are committed: only
		// these hear the failure.
		for _, at := range rest {
			items[at].Err = err
		}
		return nil
	}
	for i, at := range rest {
		items[at].Err = locking[i].Err
	}
	return nil
}

// claimNext is ClaimNext the lean way (claimLean), and the locking way
// when that claimed nothing.
func (k leanWay) claimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	if _, ok, err := k.claimLean(ctx, q, 1, take); err != nil || ok {
		return ok, err
	}
	return k.lockingWay.claimNext(ctx, q, take)
}

// claimNextMany is ClaimNextMany the lean way (claimLean), and the
// locking way when that claimed nothing.
func (k leanWay) claimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	if n, ok, err := k.claimLean(ctx, q, max, take); err != nil || ok {
		return n, err
	}
	return k.lockingWay.claimNextMany(ctx, q, max, take)
}

// estimatedNow: lean statements read the database's clock with the rows
// (observeRows, keepWritten), so a recent reading is at hand.
func (k leanWay) estimatedNow() (time.Time, bool) { return k.dbClock.estimate(time.Now()) }

// Columns are a table among a lean statement's arguments: one slice per
// column, all of one length, a row per index.
type Columns []any

// leanArgs readies query and its args (Dialect.LeanArgs); without the
// hook, each of the Columns binds as an array of its own.
func (k *Driver) leanArgs(query string, args []any) (string, []any, error) {
	if k.dialect.LeanArgs != nil {
		return k.dialect.LeanArgs(query, args)
	}
	var out []any
	for _, a := range args {
		if cols, ok := a.(Columns); ok {
			out = append(out, cols...)
		} else {
			out = append(out, a)
		}
	}
	return query, out, nil
}

// leanRows are the columns of the rows WriteRuns writes, and the events.
type leanRows struct {
	runIDs, workflows, statuses, snapshots, workers, incarnations []string
	priorities                                                    []int32
	queues                                                        []int16
	versions, lastSeqs, tokens, rowVersions                       []int64
	acquiredAt, expiresAt, notBefore                              []*time.Time
	released                                                      []bool
	eventRuns, events                                             []string
	eventSeqs                                                     []int64
}

// add appends w, a change of a row read with its version (or known:
// decided on the database time notBefore, which the write checks).
func (l *leanRows) add(w rowWrite, c driver.Change, notBefore *time.Time) error {
	snapshot := "" // unchanged
	if c.Run != nil {
		b, err := json.Marshal(w.next)
		if err != nil {
			return err
		}
		snapshot = string(b)
	}
	l.runIDs = append(l.runIDs, w.locked.RunID)
	l.workflows = append(l.workflows, w.next.WorkflowName)
	l.statuses = append(l.statuses, string(w.next.Status))
	l.priorities = append(l.priorities, int32(w.next.Priority))
	l.versions = append(l.versions, w.next.Version)
	l.lastSeqs = append(l.lastSeqs, w.lastSeq)
	l.snapshots = append(l.snapshots, snapshot)
	l.queues = append(l.queues, int16(driver.QueueOf(w.next, w.lease)))
	l.tokens = append(l.tokens, w.lease.Token)
	l.workers = append(l.workers, w.lease.Owner.Worker)
	l.incarnations = append(l.incarnations, w.lease.Owner.Incarnation)
	l.acquiredAt = append(l.acquiredAt, timeOrNil(w.lease.AcquiredAt))
	l.expiresAt = append(l.expiresAt, timeOrNil(w.lease.ExpiresAt))
	l.released = append(l.released, w.lease.Released)
	l.rowVersions = append(l.rowVersions, w.locked.RowVersion)
	l.notBefore = append(l.notBefore, notBefore)
	for _, ev := range c.Events {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		l.eventRuns, l.eventSeqs, l.events = append(l.eventRuns, ev.RunID), append(l.eventSeqs, ev.Seq), append(l.events, string(b))
	}
	return nil
}

// args are WriteRuns's arguments, with clock, the time bound into its
// clock expression.
func (l *leanRows) args(clock any) []any {
	return []any{Columns{l.runIDs, l.workflows, l.statuses, l.priorities, l.versions, l.lastSeqs, l.snapshots, l.queues, l.tokens,
		l.workers, l.incarnations, l.acquiredAt, l.expiresAt, l.released, l.rowVersions, l.notBefore},
		Columns{l.eventRuns, l.eventSeqs, l.events}, clock}
}

// timeOrNil is &t, or nil (NULL) for the zero time.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// leanDecision is one item of a lean round: its row as read and its change.
type leanDecision struct {
	item  int // index in the round's items (ModifyMany)
	write rowWrite
	cur   driver.Current
	c     driver.Change
	// known says the row was known (known.go), not read.
	known bool
}

// modifyLean is ModifyMany the lean way. Items it could not write the
// lean way (lost leanAttempts times, or relabelling) are returned, to go
// the locking way; the others have their outcome in Err (nil: written, or
// nothing to write). A failure of the first round stored nothing and is the
// call's error; a later one is the Err of every item not written.
func (k *Driver) modifyLean(ctx context.Context, items []driver.ModifyItem) (rest []int, err error) {
	pending := make([]int, len(items))
	for i := range pending {
		pending[i] = i
	}
	attempts := leanAttempts
	for attempt := 0; attempt < attempts && len(pending) > 0; attempt++ {
		lost, locking, usedKnown, err := k.modifyLeanRound(ctx, items, pending)
		if usedKnown && attempt == 0 {
			attempts++ // a known row lost is a guess that missed, not a race lost
		}
		switch {
		case err != nil && attempt == 0: // nothing was stored
			return nil, err
		case err != nil: // the first round may have stored some
			for _, p := range append(rest, pending...) {
				items[p].Err = err
			}
			return nil, nil
		}
		pending, rest = lost, append(rest, locking...)
	}
	return append(rest, pending...), nil
}

// modifyLeanRound reads the pending items' rows (those this handle knows,
// known.go, it does not read), decides and writes them, and returns those
// another writer changed meanwhile (to decide again) and those that must
// go the locking way.
func (k *Driver) modifyLeanRound(ctx context.Context, items []driver.ModifyItem, pending []int) (lost, locking []int, usedKnown bool, err error) {
	rows, ids := make(map[string]row, len(pending)), make([]string, 0, len(pending))
	wasKnown := make(map[string]bool)
	for _, p := range pending {
		if r, ok := k.knownRow(items[p].RunID); ok {
			rows[r.RunID], wasKnown[r.RunID] = r, true
		} else {
			ids = append(ids, items[p].RunID)
		}
	}
	if len(ids) > 0 {
		read, err := k.readRuns(ctx, ids)
		if err != nil {
			return nil, nil, false, err
		}
		maps.Copy(rows, read)
	}
	var decided []leanDecision
	for _, p := range pending {
		items[p].Err = nil
		r, ok := rows[items[p].RunID]
		if !ok {
			items[p].Err = runstate.ErrNotFound
			continue
		}
		cur, err := r.current()
		if err != nil {
			return nil, nil, false, err
		}
		c := items[p].Change(cur)
		if c.Empty() && wasKnown[r.RunID] {
			// Nothing to write, so nothing checks the row: a refusal
			// is decided again on the row as read.
			lost = append(lost, p)
			continue
		}
		if c.Empty() {
			continue
		}
		w := newRowWrite(r, cur, c)
		if c.Run != nil && w.labelsChanged() {
			locking = append(locking, p)
			continue
		}
		decided = append(decided, leanDecision{item: p, write: w, cur: cur, c: c, known: wasKnown[r.RunID]})
	}
	written, err := k.writeLean(ctx, decided)
	if err != nil {
		return nil, nil, false, err
	}
	for _, d := range decided {
		if !written[items[d.item].RunID] {
			lost = append(lost, d.item)
		}
	}
	return lost, locking, len(wasKnown) > 0, nil
}

// knownRow is the row of runID as this handle wrote it last, at the
// database time now (estimated, or the Clock's), if it is known.
func (k *Driver) knownRow(runID string) (row, bool) {
	r, ok := k.known.take(runID, time.Now())
	if ok && k.clock != nil {
		r.Now = driver.Timestamp(k.clock.Now())
	}
	return r, ok
}

// readRuns reads the rows of ids without locking them; a missing run has
// no entry.
func (k *Driver) readRuns(ctx context.Context, ids []string) (map[string]row, error) {
	if err := k.CheckOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil { // CTX-001
		return nil, err
	}
	query, args, err := k.dialect.Bind(k.sql.Lean.ReadRuns, []any{k.clockParam(), ids})
	if err != nil {
		return nil, err
	}
	var rows []row
	if err := k.db.SelectContext(ctx, &rows, query, args...); err != nil {
		k.known.forgetAll()
		return nil, k.dialect.Interpret(err)
	}
	k.observeRows(rows)
	out := make(map[string]row, len(rows))
	for _, r := range rows {
		out[r.RunID] = r
	}
	return out, nil
}

// observeRows takes the database time rows were read at as a reading of
// its clock.
func (k *Driver) observeRows(rows []row) {
	if len(rows) > 0 && k.clock == nil {
		k.dbClock.observe(rows[0].Now, time.Now())
	}
}

// writtenRow is a row WriteRuns wrote: its new version, and the database
// time of the statement.
type writtenRow struct {
	RunID      string    `db:"run_id"`
	RowVersion int64     `db:"row_version"`
	Now        time.Time `db:"now"`
}

// writeLean writes decided in one statement (WriteRuns) and returns the
// runs it wrote; a run another transaction wrote since it was read is not
// among them. A statement the server rolled back (a deadlock between
// statements writing rows in different orders) wrote nothing and is sent
// again; any other failure is returned (a connection lost at the commit
// may have left it stored, so it is not sent again). The announcement of
// runnable runs follows the commit.
func (k *Driver) writeLean(ctx context.Context, decided []leanDecision) (map[string]bool, error) {
	if len(decided) == 0 {
		return nil, nil
	}
	var cols leanRows
	for _, d := range decided {
		var notBefore *time.Time
		if d.known && k.clock == nil {
			notBefore = &d.cur.Now
		}
		if err := cols.add(d.write, d.c, notBefore); err != nil {
			return nil, err
		}
	}
	query, args, err := k.leanArgs(k.sql.Lean.WriteRuns, cols.args(k.clockParam()))
	if err != nil {
		return nil, err
	}
	var out []writtenRow
	err = k.retried(ctx, func() error {
		out = out[:0]
		return k.selectDrained(ctx, &out, query, args...)
	})
	if err != nil {
		k.known.forgetAll()
		return nil, err
	}
	seen := time.Now()
	written := make(map[string]int64, len(out))
	for _, w := range out {
		written[w.RunID] = w.RowVersion
	}
	k.keepWritten(decided, cols.snapshots, written, out, seen)
	runnable := false
	ok := make(map[string]bool, len(written))
	for _, d := range decided {
		if _, w := written[d.write.locked.RunID]; w {
			ok[d.write.locked.RunID] = true
			runnable = runnable || becameRunnable(&d.cur, d.write.next, d.write.lease)
		}
	}
	return ok, k.announceAfter(ctx, runnable)
}

// selectDrained is SelectContext that reads every result the statement
// sends while ctx still bounds the reads. A stored procedure's call (MySQL)
// sends a status after its rows; Rows.Close would read it after the
// driver stopped watching ctx, and a connection cut off just then held the
// call past its deadline (FAULT-003).
func (k *Driver) selectDrained(ctx context.Context, out *[]writtenRow, query string, args ...any) error {
	rows, err := k.db.QueryxContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var w writtenRow
		if err := rows.StructScan(&w); err != nil {
			return err
		}
		*out = append(*out, w)
	}
	for rows.NextResultSet() {
		for rows.Next() { // a result the statement was not expected to send
		}
	}
	return rows.Err()
}

// keepWritten keeps the rows written as known rows (known.go): each
// decided run written once, with the snapshot written (snapshots, in
// decided's order) and its new version. A run decided twice in one
// statement is not kept: which of its two rows was written is unknown.
func (k *Driver) keepWritten(decided []leanDecision, snapshots []string, written map[string]int64, out []writtenRow, seen time.Time) {
	if k.known == nil || len(out) == 0 {
		return
	}
	times := make(map[string]int, len(decided))
	for _, d := range decided {
		times[d.write.locked.RunID]++
	}
	rows := make([]row, 0, len(out))
	for i, d := range decided {
		id := d.write.locked.RunID
		if v, ok := written[id]; ok && times[id] == 1 {
			rows = append(rows, knownAfter(d.write, snapshots[i], v))
		}
	}
	k.known.put(rows, out[0].Now, seen)
	if k.clock == nil {
		k.dbClock.observe(out[0].Now, seen)
	}
}

// announceAfter runs Dialect.OnRunnable after a lean write committed, in
// a statement of its own: a wake-up, which a watcher may also get for a
// write it then finds already claimed.
func (k *Driver) announceAfter(ctx context.Context, runnable bool) error {
	if k.dialect.OnRunnable == nil || !runnable {
		return nil
	}
	return k.dialect.Interpret(k.dialect.OnRunnable(ctx, k.db))
}

// claimLean is ClaimNextMany the lean way: one read of up to max
// candidates of each kind, without locking them, and one WriteRuns of the
// claims. It answers ok false, having written nothing, when it found
// nothing claimable, or lost every run it found to other writers in
// leanAttempts rounds: the locking way then decides, and waits where it
// must (BATCH-007, LEASE-017). take is called again for the runs written, in order, so
// that its last calls are the claims (it decides on Current alone).
//
// Claims of one handle in flight at once (workers sharing a store) pass
// over each other's candidates (claimHolds): each reads as many more
// candidates as the others hold, and writes runs none of them is writing,
// instead of all writing the head of the queue, where all but one lose
// and go the locking way. The contract lets a claim pass over a run
// another call holds.
func (k *Driver) claimLean(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (n int, ok bool, err error) {
	for attempt := 0; attempt < leanAttempts; attempt++ {
		found, n, err := k.claimLeanRound(ctx, q, max, take)
		if err != nil || n > 0 || !found {
			return n, n > 0, err
		}
	}
	return 0, false, nil
}

// claimLeanRound is one round of claimLean: it reports whether it found
// candidates, and how many it claimed; none claimed of some found (another
// claim held them, or wrote them first) is worth a round more.
func (k *Driver) claimLeanRound(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (found bool, n int, err error) {
	if err := k.CheckOpen(); err != nil {
		return false, 0, err
	}
	if err := ctx.Err(); err != nil {
		return false, 0, err
	}
	mark, limit := k.claims.begin(max)
	var held []candidate
	defer func() { k.claims.done(held, mark) }()
	reading, err := k.claimCandidates(q, partTail{sql: k.sql.Lean.ClaimReadingMany, args: []any{limit}})
	if err != nil {
		return false, 0, err
	}
	var rows []row
	if err := k.db.SelectContext(ctx, &rows, reading.Query, reading.Args...); err != nil {
		return false, 0, k.dialect.Interpret(err)
	}
	k.observeRows(rows)
	candidates, err := claimableInOrder(rows, q, limit)
	if err != nil || len(candidates) == 0 {
		return false, 0, err
	}
	held = k.claims.hold(candidates, max, mark)
	decided := make([]leanDecision, 0, len(held))
	for _, c := range held {
		if change := take(c.cur); !change.Empty() { // empty: q admits a run take refuses; it is not claimed
			decided = append(decided, leanDecision{write: newRowWrite(c.row, c.cur, change), cur: c.cur, c: change})
		}
	}
	written, err := k.writeLean(ctx, decided)
	if err != nil {
		return true, 0, err
	}
	if len(written) == len(held) {
		return true, len(held), nil
	}
	for _, d := range decided {
		if written[d.write.locked.RunID] {
			take(d.cur)
			n++
		}
	}
	return true, n, nil
}

// claimHolds are the runs the lean claims of one handle in flight are
// writing, and those they wrote since the oldest read in flight began:
// such a read may still see them queued, so a claim passes over them too.
type claimHolds struct {
	mu       sync.Mutex
	ids      map[string]bool
	seq      uint64            // counts the reads begun and the holds ended
	ended    map[string]uint64 // run_id: seq when its hold ended
	reading  map[uint64]int    // reads in flight, by the seq they began at
	inFlight int               // claims between begin and done
}

// begin records a read of up to max candidates about to begin and
// returns its mark, for hold and done, and how many candidates it should
// read so that it finds max that other claims do not take: as many more
// as they hold, and max more for each other read in flight (at most
// runstate.MaxBatchItems more in all).
func (h *claimHolds) begin(max int) (mark uint64, limit int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reading == nil {
		h.ids, h.ended, h.reading = make(map[string]bool), make(map[string]uint64), make(map[uint64]int)
	}
	h.seq++
	h.reading[h.seq]++
	h.inFlight++
	return h.seq, min(max*h.inFlight+len(h.ids), max+runstate.MaxBatchItems)
}

// hold holds and returns the first max of found, read from the read
// marked mark, that no claim holds or has written since that read began.
func (h *claimHolds) hold(found []candidate, max int, mark uint64) []candidate {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := found[:0]
	for _, c := range found {
		if len(out) == max {
			break
		}
		if !h.ids[c.row.RunID] && h.ended[c.row.RunID] <= mark {
			h.ids[c.row.RunID] = true
			out = append(out, c)
		}
	}
	return out
}

// done ends the hold of held and the read marked mark, and forgets the
// holds no read in flight can have missed.
func (h *claimHolds) done(held []candidate, mark uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.inFlight--
	for _, c := range held {
		delete(h.ids, c.row.RunID)
		h.ended[c.row.RunID] = h.seq
	}
	if h.reading[mark]--; h.reading[mark] == 0 {
		delete(h.reading, mark)
	}
	oldest := h.seq
	for m := range h.reading {
		oldest = min(oldest, m)
	}
	for id, at := range h.ended {
		if at <= oldest {
			delete(h.ended, id)
		}
	}
}

// leanInserts are the columns of InsertRuns: the runs, their labels and
// their created events.
type leanInserts struct {
	runIDs, workflows, statuses, snapshots []string
	priorities                             []int32
	queues                                 []int16
	createdAt                              []time.Time
	versions, lastSeqs                     []int64
	labelRuns, labelKeys, labelValues      []string
	labelCreatedAt                         []time.Time
	eventRuns, events                      []string
	eventSeqs                              []int64
}

// add appends run r.
func (l *leanInserts) add(r driver.InsertParams) error {
	run := r.Run
	b, err := json.Marshal(run)
	if err != nil {
		return err
	}
	ev, err := json.Marshal(r.Created)
	if err != nil {
		return err
	}
	l.runIDs = append(l.runIDs, run.RunID)
	l.workflows = append(l.workflows, run.WorkflowName)
	l.statuses = append(l.statuses, string(run.Status))
	l.priorities = append(l.priorities, int32(run.Priority))
	l.createdAt = append(l.createdAt, run.CreatedAt)
	l.versions = append(l.versions, run.Version)
	l.lastSeqs = append(l.lastSeqs, r.Created.Seq)
	l.snapshots = append(l.snapshots, string(b))
	l.queues = append(l.queues, int16(driver.QueueOf(run, driver.LeaseState{})))
	for _, label := range appendLabels(nil, run) {
		l.labelRuns = append(l.labelRuns, label[0].(string))
		l.labelKeys = append(l.labelKeys, label[1].(string))
		l.labelValues = append(l.labelValues, label[2].(string))
		l.labelCreatedAt = append(l.labelCreatedAt, label[3].(time.Time))
	}
	l.eventRuns, l.eventSeqs, l.events = append(l.eventRuns, run.RunID), append(l.eventSeqs, r.Created.Seq), append(l.events, string(ev))
	return nil
}

// args are InsertRuns's arguments; announce asks it to announce runnable
// runs.
func (l *leanInserts) args(announce bool) []any {
	return []any{Columns{l.runIDs, l.workflows, l.statuses, l.priorities, l.createdAt, l.versions, l.lastSeqs, l.snapshots, l.queues},
		Columns{l.labelRuns, l.labelKeys, l.labelValues, l.labelCreatedAt}, Columns{l.eventRuns, l.eventSeqs, l.events}, announce}
}

// insertLean inserts runs in one statement (InsertRuns), which also
// announces them when a run is runnable and the dialect announces. A
// run_id that exists fails it whole, with nothing stored; the caller then
// names the item. A statement the server rolled back is sent again, as
// writeLean's.
func (k *Driver) insertLean(ctx context.Context, runs []driver.InsertParams) error {
	var cols leanInserts
	runnable := false
	for _, r := range runs {
		if err := cols.add(r); err != nil {
			return err
		}
		runnable = runnable || becameRunnable(nil, r.Run, driver.LeaseState{})
	}
	announce := runnable && k.dialect.OnRunnable != nil
	query, args, err := k.leanArgs(k.sql.Lean.InsertRuns, cols.args(announce))
	if err != nil {
		return err
	}
	return k.retried(ctx, func() error {
		_, err := k.db.ExecContext(ctx, query, args...)
		return err
	})
}

// existingIndex is the index of the first of runs whose run_id exists, or
// -1: which item an insert that failed on the key collided with.
func (k *Driver) existingIndex(ctx context.Context, runs []driver.InsertParams) (int, error) {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.Run.RunID
	}
	existing, err := k.existingRuns(ctx, k.db, ids)
	if err != nil {
		return -1, k.dialect.Interpret(err)
	}
	return slices.IndexFunc(ids, func(id string) bool { return existing[id] }), nil
}
