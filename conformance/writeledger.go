package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// ack is a write the store acknowledged: the run at that version, and
// the write's own reason, which its audit event records.
type ack struct {
	version int64
	status  runstate.RunStatus
	reason  string
}

// writeLedger is what the writers of a fault scenario saw.
type writeLedger struct {
	mu       sync.Mutex
	runs     []string
	acks     map[string][]ack
	failed   int      // writes that failed with a fault's error
	unexpect []string // writes that failed otherwise
	// lost: a run read back older than a write acknowledged on it.
	lost     []string
	afterEnd []time.Duration // per writer: from the fault's end to its first write
	span     *faultSpan
	notBack  []string // writers with no write within recoveryLimit of the end, and why
	late     []string // errors other than a fault's after the end
}

func (l *writeLedger) add(list *[]string, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*list = append(*list, fmt.Sprintf(format, args...))
}

// writeThroughFault runs writers over fresh runs, each moving its runs
// queued -> running -> waiting -> running …, each write with a reason of
// its own, spread over both handles where the target has two; starts
// fault f while they write, ends it after faultHold, and lets them go on
// until each has written again after the end, or recoveryLimit has passed.
func (c *checkState) writeThroughFault(f Fault) *writeLedger {
	const writers, runsEach = 4, 2
	l, start := c.newWriteLedger(writers, runsEach)
	handles := c.handles(writers)
	l.span = c.faultWhile(f, 200*time.Millisecond)
	c.parallel(writers, func(w int) {
		fw := &faultWriter{c: c, f: f, l: l, id: w, handle: handles[w], runs: start[w],
			stale: make([]bool, runsEach), acked: make([]int64, runsEach), conflicted: make([]int64, runsEach)}
		fw.writeUntilBack(l.span.endedAt)
	})
	for l.span.endedAt().IsZero() {
		time.Sleep(10 * time.Millisecond)
	}
	if l.failed == 0 && f.cutsOff() {
		// A reset may meet no call in flight; a partition or a restart of
		// 1.5 s cannot miss every write of four writers.
		c.Errorf(fmt.Sprintf("some writes during %s to fail: the backend cannot be reached", f.a()),
			"none failed (does the fault reach the store's handles?)")
	}
	return l
}

// newWriteLedger creates runsEach fresh runs for each of the writers, and
// the ledger that holds each run's creation as its first acknowledged write.
func (c *checkState) newWriteLedger(writers, runsEach int) (*writeLedger, [][]runstate.RunSnapshot) {
	l := &writeLedger{acks: map[string][]ack{}}
	start := make([][]runstate.RunSnapshot, writers)
	for w := range writers {
		for range runsEach {
			run := c.newRun()
			start[w] = append(start[w], run)
			l.runs = append(l.runs, run.RunID)
			l.acks[run.RunID] = []ack{{run.Version, run.Status, ""}}
		}
	}
	return l, start
}

// faultWriter is one writer of writeThroughFault, on its own handle, with
// what it knows of each of its runs.
type faultWriter struct {
	c      *checkState
	f      Fault
	l      *writeLedger
	id     int
	handle runstate.RunStateStore
	runs   []runstate.RunSnapshot // as last read or acknowledged
	stale  []bool                 // a write's outcome is unknown: read the run back first
	acked  []int64                // the version last acknowledged per run
	// conflicted: the version a write expected when it met
	// VERSION_CONFLICT, which only an applied earlier write explains.
	conflicted []int64
}

// writerCall is how one call of a faultWriter ended.
type writerCall struct {
	err   error
	wrote bool // an UpdateRun the store acknowledged
	hung  bool // the call did not return: the writer stops
}

// writeUntilBack writes and reads back the writer's runs in turn until it
// has written again after the fault's end, or recoveryLimit has passed.
func (w *faultWriter) writeUntilBack(endedAt func() time.Time) {
	var lastErr error
	for i := 0; ; i++ {
		end := endedAt()
		if !end.IsZero() && time.Since(end) > recoveryLimit {
			w.l.add(&w.l.notBack, "writer %d, last error: %s", w.id, describeErr(lastErr))
			return
		}
		k := i % len(w.runs)
		var call writerCall
		switch {
		case w.stale[k]:
			call = w.readBack(k)
		case i%3 == 2 && !slices.Contains(w.stale, true):
			call = w.writeBatch(i)
		default:
			call = w.write(k, i)
		}
		if call.hung {
			return
		}
		if call.err != nil {
			lastErr = call.err
		}
		if w.backAfter(endedAt(), call) {
			return
		}
		// Paced, so that the trails stay short enough to read whole.
		time.Sleep(10 * time.Millisecond)
	}
}

// readBack reads run k whose last write's outcome is unknown, and records
// what the read shows of acknowledged and conflicting writes.
func (w *faultWriter) readBack(k int) writerCall {
	var got runstate.RunSnapshot
	err, ok := w.c.faultCall("GetRun", w.f, func(ctx context.Context) (err error) { got, err = w.handle.GetRun(ctx, w.runs[k].RunID); return })
	if !ok {
		return writerCall{hung: true}
	}
	if err != nil {
		return writerCall{err: err}
	}
	if got.Version < w.acked[k] {
		w.l.add(&w.l.lost, "run %s read back at version %d (%s) after version %d was acknowledged", got.RunID, got.Version, got.Status, w.acked[k])
	}
	if w.conflicted[k] > 0 && got.Version <= w.conflicted[k] {
		w.l.add(&w.l.unexpect, "VERSION_CONFLICT for a write expecting version %d of run %s, which is still at version %d: no write moved it",
			w.conflicted[k], got.RunID, got.Version)
	}
	w.conflicted[k] = 0
	w.runs[k], w.stale[k] = got, false
	return writerCall{}
}

// write moves run k on, running <-> waiting, as the writer's write i.
func (w *faultWriter) write(k, i int) writerCall {
	p := transition(w.runs[k], runstate.StatusRunning)
	if w.runs[k].Status == runstate.StatusRunning {
		p = transition(w.runs[k], runstate.StatusWaiting)
	}
	p.Reason = fmt.Sprintf("writer %d write %d", w.id, i)
	var got runstate.RunSnapshot
	err, ok := w.c.faultCall("UpdateRun", w.f, func(ctx context.Context) (err error) { got, err = w.handle.UpdateRun(ctx, p); return })
	if !ok {
		return writerCall{hung: true}
	}
	if err != nil {
		w.writeFailed(k, p, err)
		return writerCall{err: err}
	}
	w.runs[k], w.acked[k] = got, got.Version
	w.l.mu.Lock()
	w.l.acks[got.RunID] = append(w.l.acks[got.RunID], ack{got.Version, got.Status, p.Reason})
	w.l.mu.Unlock()
	return writerCall{wrote: true}
}

// writeBatch moves every run of the writer on in one UpdateRuns, as its
// write i: a batch cut off by the fault fails whole with the fault's
// error, its items applied each wholly or not at all (read back before
// they are written again); one that is answered gives each item its own
// outcome.
func (w *faultWriter) writeBatch(i int) writerCall {
	updates := make([]runstate.UpdateRunParams, len(w.runs))
	for k, run := range w.runs {
		updates[k] = transition(run, runstate.StatusRunning)
		if run.Status == runstate.StatusRunning {
			updates[k] = transition(run, runstate.StatusWaiting)
		}
		updates[k].Reason = fmt.Sprintf("writer %d batch write %d", w.id, i)
	}
	var res runstate.UpdateRunsResult
	err, ok := w.c.faultCall("UpdateRuns", w.f, func(ctx context.Context) (err error) {
		res, err = runstate.UpdateRuns(ctx, w.handle, runstate.UpdateRunsParams{Updates: updates})
		return
	})
	if !ok {
		return writerCall{hung: true}
	}
	if err == nil && len(res.Items) != len(updates) {
		err = fmt.Errorf("UpdateRuns answered %d items for %d updates", len(res.Items), len(updates))
	}
	if err != nil {
		for k := range w.runs {
			w.writeFailed(k, updates[k], err)
		}
		return writerCall{err: err}
	}
	call := writerCall{wrote: true}
	for k, item := range res.Items {
		if item.Err != nil {
			w.writeFailed(k, updates[k], item.Err)
			call = writerCall{err: item.Err}
			continue
		}
		w.runs[k], w.acked[k] = item.Run, item.Run.Version
		w.l.mu.Lock()
		w.l.acks[item.Run.RunID] = append(w.l.acks[item.Run.RunID], ack{item.Run.Version, item.Run.Status, updates[k].Reason})
		w.l.mu.Unlock()
	}
	return call
}

// writeFailed records write p of run k that failed with err; its outcome
// is unknown, so the run is read back before it is written again.
func (w *faultWriter) writeFailed(k int, p runstate.UpdateRunParams, err error) {
	w.stale[k] = true
	switch {
	case faultError(err):
		w.l.mu.Lock()
		w.l.failed++
		w.l.mu.Unlock()
	case errors.Is(err, runstate.ErrVersionConflict):
		// An earlier write whose outcome was unknown was
		// applied: the next read must show it.
		w.conflicted[k] = p.ExpectedVersion
	default:
		w.l.add(&w.l.unexpect, "%s", describeErr(err))
	}
}

// backAfter reports, once the fault has ended at end (zero: not yet),
// whether call was a write after the end, which the writer waited for;
// an error other than a fault's after the end is recorded.
func (w *faultWriter) backAfter(end time.Time, call writerCall) bool {
	if end.IsZero() {
		return false
	}
	if call.wrote {
		w.l.mu.Lock()
		w.l.afterEnd = append(w.l.afterEnd, time.Since(end))
		w.l.mu.Unlock()
		return true
	}
	if call.err != nil && !faultError(call.err) && !errors.Is(call.err, runstate.ErrVersionConflict) {
		w.l.add(&w.l.late, "writer %d: %s", w.id, describeErr(call.err))
	}
	return false
}
