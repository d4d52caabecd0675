package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/runstate/runstate"
)

// Outcome is what became of a run the worker held.
type Outcome string

// Outcomes.
const (
	// Succeeded: the handler returned nil and the run is success.
	Succeeded Outcome = "succeeded"
	// Failed: the run is failed, with a diagnostic saying why.
	Failed Outcome = "failed"
	// Retried: the attempt failed and the run waits, parked, for the next.
	Retried Outcome = "retried"
	// HandedBack: the handler was stopped (a drain past its grace, a lease
	// that may have lapsed) and the run waits for any worker to claim it.
	HandedBack Outcome = "handed back"
	// Settled: the handler made the run's last write itself (Job.Settle).
	Settled Outcome = "settled"
	// Lost: the lease was lost; another worker owns the run.
	Lost Outcome = "lost"
	// Unwritten: the outcome could not be written (the store refused it,
	// or was away until the lease's time was up). The run is as the
	// handler last left it; a lease still held expires, and recovery
	// settles the run.
	Unwritten Outcome = "unwritten"
)

// Done is a run the worker no longer holds.
type Done struct {
	// Run is the run after the outcome's write, or as the worker last saw
	// it when nothing was written.
	Run     runstate.RunSnapshot
	Outcome Outcome
	// Err is the handler's error (Failed, Retried, HandedBack), or why the
	// outcome was not written (Unwritten, Lost).
	Err error
}

// Permanent marks err as one no retry can mend: the run fails at once.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// ErrorCoder is an error that names its diagnostic error code; other
// errors fail a run with HANDLER_ERROR (a panic with HANDLER_PANIC).
type ErrorCoder interface {
	ErrorCode() string
}

// outcome is a handler's outcome on its way to the store.
type outcome struct {
	job        *Job
	kind       Outcome
	update     runstate.UpdateRunParams
	handlerErr error
}

// outcomeOf decides the write a returned handler's run needs; false: none
// (its lease was lost).
func (w *Worker) outcomeOf(j *Job, err error) (outcome, bool) {
	cause := context.Cause(j.ctx)
	if errors.Is(cause, runstate.ErrLeaseLost) {
		return outcome{}, false
	}
	run, lease := j.Run(), j.Lease()
	o := outcome{job: j, handlerErr: err, update: runstate.UpdateRunParams{RunID: j.id, ExpectedVersion: run.Version,
		LeaseToken: lease.Token, Actor: w.actor, ReleaseLease: true}}
	u := &o.update
	var p panicked
	switch {
	case err == nil:
		o.kind, u.Status = Succeeded, string(runstate.StatusSuccess)
	case j.ctx.Err() != nil:
		o.kind, u.Status = HandedBack, string(runstate.StatusWaiting)
		u.Reason = clip("handed back: "+cause.Error(), runstate.MaxReasonLen)
	case errors.As(err, new(permanentError)), errors.As(err, &p), j.attempt >= w.cfg.MaxAttempts:
		o.kind, u.Status = Failed, string(runstate.StatusFailed)
		u.Diagnostic = diagnosticOf(err, j.attempt)
	default:
		o.kind, u.Status = Retried, string(runstate.StatusWaiting)
		wake := time.Now().Add(w.cfg.Backoff(j.attempt))
		u.WakeAt = &wake
		u.Labels = cloneLabels(run.Labels)
		u.Labels[AttemptLabel] = strconv.Itoa(j.attempt)
		u.Reason = clip(fmt.Sprintf("attempt %d of %d failed, the next at %s: %v", j.attempt, w.cfg.MaxAttempts,
			wake.UTC().Format(time.RFC3339Nano), err), runstate.MaxReasonLen)
	}
	return o, true
}

func diagnosticOf(err error, attempt int) *runstate.Diagnostic {
	code := "HANDLER_ERROR"
	var coder ErrorCoder
	var p panicked
	switch {
	case errors.As(err, &p):
		code = "HANDLER_PANIC"
	case errors.As(err, &coder) && coder.ErrorCode() != "":
		code = clip(coder.ErrorCode(), runstate.MaxErrorCodeLen)
	}
	return &runstate.Diagnostic{ErrorCode: code, Message: clip(err.Error(), runstate.MaxDetailValueLen),
		Retryable: !errors.As(err, new(permanentError)), Details: map[string]string{"attempts": strconv.Itoa(attempt)}}
}

func cloneLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// completer writes outcomes in batches. A batch goes at once when no
// write is in flight; while one is, outcomes gather for the next, which
// goes when the write ends, or as soon as a full batch waits, up to
// CompletionsInFlight writes at once. So a lone outcome waits for
// nothing, and under load the batches grow with the store's write time
// (the driver kit's group commit, for a worker's completions).
type completer struct {
	w     *Worker
	ctx   context.Context
	queue chan outcome
	done  chan struct{} // closed when the dispatcher has ended
}

func (w *Worker) startCompleters(ctx context.Context) *completer {
	c := &completer{w: w, ctx: ctx, queue: make(chan outcome, w.cfg.Slots), done: make(chan struct{})}
	go c.dispatch()
	return c
}

// submit queues an outcome; it waits while the queue is full, so that a
// store slower than the handlers holds the slots back.
func (c *completer) submit(o outcome) { c.queue <- o }

// finish writes what is queued and returns when every write has ended.
func (c *completer) finish() {
	close(c.queue)
	<-c.done
}

// dispatch gathers outcomes and sends them in batches, until the queue is
// closed and everything in it written.
func (c *completer) dispatch() {
	defer close(c.done)
	var pending []outcome
	inFlight, open := 0, true
	ended := make(chan struct{}, c.w.cfg.CompletionsInFlight)
	for open || len(pending) > 0 || inFlight > 0 {
		queue := c.queue
		if !open || len(pending) >= c.w.cfg.Slots {
			queue = nil // closed, or a full queue's worth waits already
		}
		select {
		case o, ok := <-queue:
			if !ok {
				open = false
				break
			}
			pending = append(pending, o)
			for more := true; more && len(pending) < c.w.cfg.CompleteBatch; {
				select {
				case o, ok := <-c.queue:
					if !ok {
						open, more = false, false
						break
					}
					pending = append(pending, o)
				default:
					more = false
				}
			}
		case <-ended:
			inFlight--
		}
		for len(pending) > 0 && inFlight < c.w.cfg.CompletionsInFlight && (inFlight == 0 || len(pending) >= c.w.cfg.CompleteBatch) {
			batch := pending[:min(len(pending), c.w.cfg.CompleteBatch)]
			pending = pending[len(batch):]
			inFlight++
			go func() {
				defer func() { ended <- struct{}{} }()
				c.write(batch)
			}()
		}
	}
}

// write writes a batch until each outcome is written, refused, or given
// up: an outcome the store could not take for being away is sent again
// after a pause, until its lease's time is up (then recovery settles the
// run).
func (c *completer) write(batch []outcome) {
	for pause := 20 * time.Millisecond; len(batch) > 0; pause = min(2*pause, time.Second) {
		updates := make([]runstate.UpdateRunParams, len(batch))
		for i, o := range batch {
			updates[i] = o.update
		}
		res, err := runstate.UpdateRuns(c.ctx, c.w.store, runstate.UpdateRunsParams{Updates: updates})
		var again []outcome
		for i, o := range batch {
			itemErr := err
			if err == nil {
				itemErr = res.Items[i].Err
			}
			switch {
			case itemErr == nil:
				c.written(o, res.Items[i].Run)
			case errors.Is(itemErr, runstate.ErrUnavailable) && !c.expired(o):
				again = append(again, o)
			case errors.Is(itemErr, runstate.ErrUnsupported) && o.update.WakeAt != nil:
				// A store that cannot park (a plugin of an older protocol):
				// the retry waits for no backoff.
				c.w.log.Warn("the store cannot park runs: a retry goes at once, without its backoff", "run_id", o.job.id)
				o.update.WakeAt = nil
				again = append(again, o)
			default:
				c.refused(o, itemErr)
			}
		}
		batch = again
		if len(batch) > 0 {
			c.w.log.Warn("the store did not take outcomes; sending them again", "runs", len(batch), "error", err, "pause", pause)
			time.Sleep(pause)
		}
	}
}

// expired reports that the outcome's lease is past its time as this
// process tells it.
func (c *completer) expired(o outcome) bool {
	_, expires, _ := o.job.renewal()
	return time.Now().After(expires)
}

func (c *completer) written(o outcome, run runstate.RunSnapshot) {
	o.job.stage(completing, ended)
	if o.kind == Retried && o.update.WakeAt != nil {
		c.w.WakeAt(*o.update.WakeAt)
	}
	c.w.log.Debug("run done", "run_id", o.job.id, "outcome", o.kind, "status", run.Status)
	c.w.forget(o.job, Done{Run: run, Outcome: o.kind, Err: o.handlerErr})
}

// refused ends an outcome the store would not take. A run whose lease is
// lost is another worker's; otherwise its lease is released, best effort,
// so that the run does not wait out the TTL for recovery.
func (c *completer) refused(o outcome, err error) {
	o.job.stage(completing, ended)
	run := o.job.Run()
	if errors.Is(err, runstate.ErrLeaseLost) {
		c.w.log.Warn("the run's lease was lost before its outcome was written: another worker owns it", "run_id", o.job.id, "outcome", o.kind)
		c.w.forget(o.job, Done{Run: run, Outcome: Lost, Err: err})
		return
	}
	c.w.log.Error("the store refused the run's outcome; the run is left as it is", "run_id", o.job.id, "outcome", o.kind, "error", err)
	if rel := c.w.store.ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: o.job.id, Token: o.update.LeaseToken}); rel != nil &&
		!errors.Is(rel, runstate.ErrLeaseLost) {
		c.w.log.Warn("could not release the run's lease: it expires in its time", "run_id", o.job.id, "error", rel)
	}
	c.w.forget(o.job, Done{Run: run, Outcome: Unwritten, Err: err})
}
