package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// sentBefore: an earlier sending got no answer, and may have committed.
	sentBefore bool
	// plain: the outcome is a plain failure already (plainFailure).
	plain bool
}

// plainFailure is o as a failure whose words the store surely takes: a
// fixed message, the run's labels left as they are.
func (o outcome) plainFailure() outcome {
	o.kind, o.plain = Failed, true
	o.update.Status, o.update.WakeAt, o.update.Labels, o.update.Reason = string(runstate.StatusFailed), nil, nil, ""
	o.update.Diagnostic = &runstate.Diagnostic{ErrorCode: "HANDLER_ERROR", Retryable: true,
		Message: "the handler failed; the store refused its error's text (see the worker's log)"}
	return o
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

// clip cuts s to at most n bytes, on a rune boundary, as valid UTF-8
// without NUL bytes (which stores refuse); empty, it says so.
func clip(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if s == "" {
		s = "(no message)"
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// completer writes outcomes in batches. An outcome waits for others to
// share its write for up to CompleteLinger, and while a write is in
// flight for that write's end; a full batch goes at once, up to
// CompletionsInFlight writes at once. So the batches grow with the load
// and the store's write time, and a lone outcome waits CompleteLinger at
// most (nothing, by default: then the batches are what gathers during one
// write).
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

// submit queues an outcome; it waits while the queue is full and as many
// outcomes wait as the completer holds back (waitingCap), so that a store
// slower than the handlers holds the slots back.
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
	cfg := c.w.cfg
	var pending []outcome // at most c.waitingCap(): the queue is not read while that many wait
	var since time.Time   // when the oldest of pending came
	inFlight, open := 0, true
	ended := make(chan struct{}, cfg.CompletionsInFlight)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for open || len(pending) > 0 || inFlight > 0 {
		queue := c.queue
		if !open || len(pending) >= c.waitingCap() {
			queue = nil // closed, or as many wait as may
		}
		select {
		case o, ok := <-queue:
			if !ok {
				open = false
				break
			}
			if len(pending) == 0 { // the oldest pending outcome came now
				since = time.Now()
				if cfg.CompleteLinger > 0 {
					linger.Reset(cfg.CompleteLinger)
				}
			}
			pending = append(pending, o)
			for more := true; more && len(pending) < c.waitingCap(); {
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
		case <-linger.C:
		}
		for len(pending) > 0 && inFlight < cfg.CompletionsInFlight && c.due(len(pending), inFlight, open, since) {
			batch := pending[:min(len(pending), cfg.CompleteBatch)]
			pending = pending[len(batch):]
			inFlight++
			go func() {
				defer func() { ended <- struct{}{} }()
				c.write(batch)
			}()
		}
	}
}

// waitingCap is how many outcomes may wait beside the writes in flight
// before the handlers wait to hand theirs over: a slot's worth, so that
// the finished runs not yet written stay a few times the slots; with a
// linger, a full batch, which is what lingering gathers for.
func (c *completer) waitingCap() int {
	if c.w.cfg.CompleteLinger > 0 {
		return max(c.w.cfg.Slots, c.w.cfg.CompleteBatch)
	}
	return c.w.cfg.Slots
}

// due tells whether the pending outcomes go now: a full batch always; the
// rest once no write is in flight and the oldest has waited its linger,
// or when the worker stops (nothing more will come to share the write).
func (c *completer) due(pending, inFlight int, open bool, since time.Time) bool {
	switch {
	case pending >= c.w.cfg.CompleteBatch || !open:
		return true
	case inFlight > 0:
		return false
	}
	return time.Since(since) >= c.w.cfg.CompleteLinger
}

// write writes a batch until each outcome is written, refused, or given
// up: an outcome the store could not take for being away (or for not
// answering before the batch's leases were up) is sent again after a
// pause, until its lease's time is up (then recovery settles the run).
func (c *completer) write(batch []outcome) {
	for pause := 20 * time.Millisecond; len(batch) > 0; pause = min(2*pause, time.Second) {
		updates := make([]runstate.UpdateRunParams, len(batch))
		for i, o := range batch {
			updates[i] = o.update
		}
		ctx, cancel := context.WithDeadline(c.ctx, c.deadline(batch))
		res, err := runstate.UpdateRuns(ctx, c.w.store, runstate.UpdateRunsParams{Updates: updates})
		cancel()
		var again []outcome
		for i, o := range batch {
			itemErr := err
			if err == nil {
				itemErr = res.Items[i].Err
			}
			if again, itemErr = c.settle(o, res, i, itemErr, again); itemErr != nil {
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

// settle acts on one outcome's answer: written, or queued in again to be
// sent again (with what changes), or its error returned for refused.
func (c *completer) settle(o outcome, res runstate.UpdateRunsResult, i int, err error, again []outcome) ([]outcome, error) {
	unanswered := errors.Is(err, runstate.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case err == nil:
		c.written(o, res.Items[i].Run)
	case unanswered && !c.expired(o):
		o.sentBefore = true
		return append(again, o), nil
	case o.sentBefore && errors.Is(err, runstate.ErrLeaseLost):
		// An earlier sending the store did not answer may have committed
		// and released the lease: the run says whether it did.
		run, ok := c.committedBefore(o)
		if !ok {
			return again, err
		}
		c.written(o, run)
	case errors.Is(err, runstate.ErrUnsupported) && o.update.WakeAt != nil:
		// A store that cannot park (a plugin of an older protocol): the
		// retry waits for no backoff.
		c.w.log.Warn("the store cannot park runs: a retry goes at once, without its backoff", "run_id", o.job.id)
		o.update.WakeAt = nil
		return append(again, o), nil
	case errors.Is(err, runstate.ErrInvalidArgument) && o.kind != Succeeded && !o.plain:
		// The store would not take the handler's words (its error text,
		// the attempt label on a run with all its labels): the run fails
		// with a plain diagnostic instead.
		c.w.log.Warn("the store refused the outcome's text; failing the run with a plain diagnostic", "run_id", o.job.id, "error", err)
		return append(again, o.plainFailure()), nil
	default:
		return again, err
	}
	return again, nil
}

// deadline is when a write of batch stops waiting for the store: when the
// last of its leases is up (at least a second from now), so that a store
// that does not answer holds no drain longer than the leases it could
// still honour.
func (c *completer) deadline(batch []outcome) time.Time {
	last := time.Now().Add(time.Second)
	for _, o := range batch {
		if _, expires, _ := o.job.renewal(); expires.After(last) {
			last = expires
		}
	}
	return last
}

// committedBefore reads the run to tell whether an earlier sending of o
// committed: the run is at the version after it, in the status it wrote.
func (c *completer) committedBefore(o outcome) (runstate.RunSnapshot, bool) {
	ctx, cancel := context.WithTimeout(c.ctx, c.w.cfg.RenewEvery)
	defer cancel()
	run, err := c.w.store.GetRun(ctx, o.job.id)
	if err != nil || run.Version != o.update.ExpectedVersion+1 || string(run.Status) != o.update.Status {
		return run, false
	}
	return run, true
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
	ctx, cancel := context.WithTimeout(c.ctx, c.w.cfg.RenewEvery)
	defer cancel()
	if rel := c.w.store.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: o.job.id, Token: o.update.LeaseToken}); rel != nil &&
		!errors.Is(rel, runstate.ErrLeaseLost) {
		c.w.log.Warn("could not release the run's lease: it expires in its time", "run_id", o.job.id, "error", rel)
	}
	c.w.forget(o.job, Done{Run: run, Outcome: Unwritten, Err: err})
}
