package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// Job is one run in a handler's hands: its latest snapshot and lease, and
// the writes the handler makes to it under that lease.
type Job struct {
	w         *Worker
	id        string // the run's id, which never changes
	ctx       context.Context
	cancel    context.CancelCauseFunc
	attempt   int
	started   bool
	takenOver bool
	// prev is the run's job before this one, when this worker claimed the
	// run again before it reported the last (a retry claimed at once):
	// this one reports after it, so that OnDone sees a run's outcomes in
	// order. reported is closed once this one has reported.
	prev     *Job
	reported chan struct{}

	mu    sync.Mutex
	run   runstate.RunSnapshot
	lease runstate.Lease
	// expires is when the lease ends at the latest as this process can
	// tell: the local time the last accepted claim or renewal was sent,
	// plus the TTL. The store's expiry is no earlier (its clock read the
	// request after it was sent), so a lease this process thinks live may
	// have longer, never shorter.
	expires time.Time
	state   jobState
	// lapse ends the handler's context (ErrLeaseLapsed) at expires, unless
	// a renewal moved expires on first.
	lapse *time.Timer
}

// jobState is where a job is between its claim and its end.
type jobState int

const (
	inHandler  jobState = iota
	completing          // the outcome is with the completer
	ended               // written, settled, or lost
)

func newJob(w *Worker, parent context.Context, c claimedRun) *Job {
	ctx, cancel := context.WithCancelCause(parent)
	j := &Job{w: w, id: c.Run.RunID, ctx: ctx, cancel: cancel, reported: make(chan struct{}), started: c.started,
		takenOver: c.takenOver, run: c.Run, lease: c.Lease, expires: c.sent.Add(w.cfg.LeaseTTL)}
	j.attempt = failedAttempts(c.Run) + 1
	j.lapse = time.AfterFunc(time.Until(j.expires), j.lapsed)
	return j
}

// failedAttempts reads the run's AttemptLabel (0 when absent or not a count).
func failedAttempts(run runstate.RunSnapshot) int {
	n, err := strconv.Atoi(run.Labels[AttemptLabel])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Run returns the run as the job last saw it: as claimed, or after the
// handler's last write through Update.
func (j *Job) Run() runstate.RunSnapshot {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.run.Clone()
}

// Lease returns the lease the worker holds on the run, as last claimed or
// renewed.
func (j *Job) Lease() runstate.Lease {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lease
}

// Attempt counts this run's handler executions, from 1: one more than the
// attempts that failed before (AttemptLabel).
func (j *Job) Attempt() int { return j.attempt }

// Started reports that the claim moved the run to running in its own
// write (a status of Config.Start). A run claimed in another status is
// the handler's to move on: waiting, it goes on once the handler resumes
// it (through a handle of its own, then Job.Settled); running, it was
// taken over (TakenOver).
func (j *Job) Started() bool { return j.started }

// TakenOver reports that the run was claimed running, as recovery left it
// under RecoverTakeover: an earlier worker began it and died.
func (j *Job) TakenOver() bool { return j.takenOver }

// Settled records that the handler made the run's last write itself,
// through a handle of its own (a tracker), releasing the lease or leaving
// it to lapse: the worker writes nothing for the run and stops renewing
// its lease. run is the run as that write left it, for OnDone.
func (j *Job) Settled(run runstate.RunSnapshot) {
	if !j.stage(inHandler, ended) {
		return
	}
	j.w.forget(j, Done{Run: run, Outcome: Settled})
}

// Update writes p to the run under the job's lease: it fills in RunID,
// ExpectedVersion (the job's last snapshot) and LeaseToken, and the
// worker's actor when p has none. The run it returns is the job's from
// then on. A write refused for a lost lease cancels the handler's context
// (runstate.ErrLeaseLost). A status change or ReleaseLease is the run's
// last write, which belongs to Settle (or to the worker, from what the
// handler returns): Update refuses them (ErrInvalidArgument).
func (j *Job) Update(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	switch {
	case p.ReleaseLease:
		return runstate.RunSnapshot{}, runstate.InvalidArgument("release_lease", "is the run's last write: use Job.Settle")
	case p.Status != "":
		return runstate.RunSnapshot{}, runstate.InvalidArgument("status", "changes are the run's last write, which the worker makes from the handler's return, or Job.Settle")
	}
	return j.write(ctx, p)
}

// Settle makes the run's last write under the job's lease, as Update does,
// and releases the lease in the same write: the handler's own final
// status, or a park (WakeAt). Once it is committed the worker writes
// nothing for the run, whatever the handler returns; if it is refused the
// handler's return decides as usual.
func (j *Job) Settle(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	p.ReleaseLease = true
	run, err := j.write(ctx, p)
	if err == nil && j.stage(inHandler, ended) {
		j.w.forget(j, Done{Run: run, Outcome: Settled})
	}
	return run, err
}

func (j *Job) write(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	j.mu.Lock()
	if j.state != inHandler {
		j.mu.Unlock()
		return runstate.RunSnapshot{}, runstate.InvalidArgument("job", "the handler has settled or returned: the run is no longer in its hands")
	}
	p.RunID, p.ExpectedVersion, p.LeaseToken = j.id, j.run.Version, j.lease.Token
	j.mu.Unlock()
	if p.Actor == (runstate.Actor{}) {
		p.Actor = j.w.actor
	}
	run, err := j.w.store.UpdateRun(ctx, p)
	if errors.Is(err, runstate.ErrLeaseLost) {
		j.lose()
	}
	if err != nil {
		return run, err
	}
	j.mu.Lock()
	j.run = run
	j.mu.Unlock()
	return run, nil
}

// lose ends the handler's context: another worker owns the run.
func (j *Job) lose() { j.cancel(runstate.ErrLeaseLost) }

// renewed records a renewal the store accepted, sent at sent, and answers
// by how much it came after the lease's expiry as this process tells it
// (zero or less: in time).
func (j *Job) renewed(l runstate.Lease, sent time.Time) (late time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	late = sent.Sub(j.expires)
	j.lease.ExpiresAt = l.ExpiresAt
	j.expires = sent.Add(j.w.cfg.LeaseTTL)
	j.lapse.Reset(time.Until(j.expires))
	return late
}

// lapsed ends the handler's context when the lease's time is up with no
// renewal taken since: another worker may own the run now, so its side
// effects stop, as fencing requires, without waiting for a renewal's
// answer.
func (j *Job) lapsed() {
	j.mu.Lock()
	up := j.state == inHandler && !time.Now().Before(j.expires)
	expires := j.expires
	j.mu.Unlock()
	if !up || j.ctx.Err() != nil {
		return
	}
	j.w.log.Error("the run's lease is past its time with no renewal taken: another worker may own it now; stopping its handler",
		"run_id", j.id, "expired_at", expires)
	j.cancel(ErrLeaseLapsed)
}

// renewal answers what a renewal now needs: the lease, and whether the
// job still holds one to renew.
func (j *Job) renewal() (runstate.Lease, time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lease, j.expires, j.state != ended
}

// stage moves the job on to st, answering whether it was in from.
func (j *Job) stage(from, st jobState) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state != from {
		return false
	}
	j.state = st
	return true
}

// is reports whether the job is in st.
func (j *Job) is(st jobState) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.state == st
}
