package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/runstate/runstate"
)

// Handler executes one run. Its context is fenced: cancelled when the run's
// lease is lost, may have lapsed, or the worker drains past its grace
// (context.Cause says which: runstate.ErrLeaseLost, ErrLeaseLapsed,
// ErrDraining). What it returns decides the run's next write:
//
//   - nil: success;
//   - an error: a retry, parked for Config.Backoff, while attempts are
//     left and the error is not Permanent; failed otherwise;
//   - after its context was cancelled by a lease lost: nothing, whatever
//     it returns (the run is someone else's); by a lapse or a drain: nil is
//     still success (the work was done; the write is fenced), an error
//     hands the run back (waiting, released).
//
// A handler that makes the run's last write itself (its own final status,
// a park) calls Job.Settle with it, and the worker then writes nothing.
type Handler func(ctx context.Context, job *Job) error

// Config configures a worker. Store, Owner and Handler are required; the
// rest have defaults.
type Config struct {
	// Store is the store the runs live in; it must have leases.
	Store runstate.RunStateStore
	// Owner names this worker in leases: unique to this process (a new
	// Incarnation each start).
	Owner runstate.Owner
	// Handler executes each run.
	Handler Handler
	// Slots is how many handlers run at once: 1 to runstate.MaxBatchItems,
	// default DefaultSlots.
	Slots int
	// Filter selects the runs to claim. Its statuses default to queued and
	// waiting; running may be added, to take over the runs that recovery
	// released under RecoverTakeover (claimed as they are, Job.TakenOver
	// set).
	Filter runstate.RunnableFilter
	// Start lists the statuses of Filter whose runs a claim moves to
	// running in its own write (Job.Started); queued and waiting, or
	// either: by default both of those the filter has. A run of another
	// status is claimed as it is, and its handler moves it on.
	Start []string
	// LeaseTTL is each lease's duration, default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// RenewEvery is how often the leases in hand are renewed, default a
	// third of LeaseTTL; it must be shorter than LeaseTTL.
	RenewEvery time.Duration
	// Watcher announces runnable runs when the store itself does not (a
	// watch opened beside it, as a shared socket's); by default the
	// store's own (runstate.RunnableWatcher), if it has one.
	Watcher runstate.RunnableWatcher
	// Poll is how often an idle worker looks for runs without a notice,
	// default DefaultPoll.
	Poll time.Duration
	// MaxAttempts is how many times a run's handler is tried before the run
	// fails, default DefaultMaxAttempts; 1 never retries.
	MaxAttempts int
	// Backoff is how long a run waits, parked, before its next attempt
	// (attempt is the one that just failed, from 1); default
	// DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// Grace is how long the runs in hand may go on after Run's context
	// ends, default DefaultGrace.
	Grace time.Duration
	// CompleteBatch is the most outcomes one completion write carries, 1
	// to runstate.MaxBatchItems, default DefaultCompleteBatch.
	CompleteBatch int
	// CompletionsInFlight is how many completion writes may be in flight
	// at once, default DefaultCompletionsInFlight.
	CompletionsInFlight int
	// CompleteLinger is how long an outcome may wait for others to share
	// its write (and, besides, for any write in flight to end): fewer,
	// larger writes, at the cost of holding each run (and its lease, still
	// renewed) up to that much longer before its outcome is committed, and
	// of up to a batch's worth of finished runs waiting besides those in
	// flight (a slot's worth without it). Zero, the default, sends an
	// outcome as soon as no write is in flight. It must be shorter than
	// LeaseTTL, a sanity bound: a longer wait buys nothing more.
	CompleteLinger time.Duration
	// Logger receives the worker's lines; nil logs nothing.
	Logger *slog.Logger
	// OnClaim, when set, sees each claim call (metrics). It must not block.
	OnClaim func(ClaimReport)
	// OnDone, when set, sees each run once its outcome's write committed
	// (the run after it), or when the worker learnt the run is no longer
	// its own. It must not block.
	OnDone func(Done)
}

// Defaults of Config.
const (
	DefaultSlots               = 10
	DefaultLeaseTTL            = 30 * time.Second
	DefaultPoll                = time.Second
	DefaultMaxAttempts         = 3
	DefaultGrace               = 30 * time.Second
	DefaultCompleteBatch       = 100
	DefaultCompletionsInFlight = 4
)

// DefaultBackoff waits 1s after the first failed attempt, doubling with
// each further one up to an hour, each wait cut by up to a fifth at random
// so that runs that failed together do not retry together.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = min(time.Hour, time.Second<<(max(attempt, 1)-1))
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// Causes of a handler's cancelled context, besides runstate.ErrLeaseLost.
var (
	// ErrLeaseLapsed: renewals kept failing until the lease's time was up,
	// so another worker may own the run now.
	ErrLeaseLapsed = errors.New("worker: the run's lease may have lapsed: its renewals failed until its expiry")
	// ErrDraining: the worker is stopping and the run's grace is over.
	ErrDraining = errors.New("worker: the worker is draining and the run's grace is over")
)

// AttemptLabel is the run label in which the worker keeps the attempts
// that failed so far.
const AttemptLabel = "runstate.dev/failed-attempts"

// withDefaults checks c and fills in its defaults; a bad field is an
// ErrInvalidArgument naming it.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, runstate.InvalidArgument("store", "is nil")
	case c.Handler == nil:
		return c, runstate.InvalidArgument("handler", "is nil")
	case c.Owner.Worker == "" || c.Owner.Incarnation == "":
		return c, runstate.InvalidArgument("owner", "needs a worker and an incarnation (unique to this process)")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Slots, DefaultSlots)
	def(&c.MaxAttempts, DefaultMaxAttempts)
	def(&c.CompleteBatch, DefaultCompleteBatch)
	def(&c.CompletionsInFlight, DefaultCompletionsInFlight)
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defd(&c.LeaseTTL, DefaultLeaseTTL)
	defd(&c.RenewEvery, c.LeaseTTL/3)
	defd(&c.Poll, DefaultPoll)
	defd(&c.Grace, DefaultGrace)
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if len(c.Filter.Statuses) == 0 {
		c.Filter.Statuses = []string{string(runstate.StatusQueued), string(runstate.StatusWaiting)}
	}
	if c.Start == nil {
		c.Start = []string{string(runstate.StatusQueued), string(runstate.StatusWaiting)}
	}
	return c, c.check()
}

func (c Config) check() error {
	inRange := func(field string, v, lo, hi int) error {
		if v < lo || v > hi {
			return runstate.InvalidArgument(field, "is %d; want %d to %d", v, lo, hi)
		}
		return nil
	}
	if err := errors.Join(inRange("slots", c.Slots, 1, runstate.MaxBatchItems), inRange("max_attempts", c.MaxAttempts, 1, 1000),
		inRange("complete_batch", c.CompleteBatch, 1, runstate.MaxBatchItems), inRange("completions_in_flight", c.CompletionsInFlight, 1, 64)); err != nil {
		return err
	}
	if err := runstate.ValidateTTL(c.LeaseTTL); err != nil {
		return err
	}
	switch {
	case c.RenewEvery <= 0 || c.RenewEvery >= c.LeaseTTL:
		return runstate.InvalidArgument("renew_every", "is %v; want a positive duration shorter than the lease (%v)", c.RenewEvery, c.LeaseTTL)
	case c.Poll <= 0:
		return runstate.InvalidArgument("poll", "is %v; want a positive duration", c.Poll)
	case c.CompleteLinger < 0 || c.CompleteLinger >= c.LeaseTTL:
		return runstate.InvalidArgument("complete_linger", "is %v; want zero or more, shorter than the lease (%v)", c.CompleteLinger, c.LeaseTTL)
	case c.Grace < 0:
		return runstate.InvalidArgument("grace", "is %v; want zero or more", c.Grace)
	}
	for _, s := range c.Filter.Statuses {
		st, err := runstate.ParseRunStatus(s)
		if err != nil {
			return err
		}
		if st.Terminal() {
			return runstate.InvalidArgument("filter.statuses", "names %s, a terminal status: no run in it is ever claimable", st)
		}
	}
	for _, s := range c.Start {
		if s != string(runstate.StatusQueued) && s != string(runstate.StatusWaiting) {
			return runstate.InvalidArgument("start", "names %q; a claim starts queued and waiting runs only", s)
		}
	}
	return nil
}

// startable splits the filter's statuses into those a claim starts and
// the others.
func (c Config) startable() (start, rest []string) {
	for _, s := range c.Filter.Statuses {
		st, _ := runstate.ParseRunStatus(s)
		switch {
		case slices.Contains(c.Start, string(st)):
			if !slices.Contains(start, string(st)) {
				start = append(start, string(st))
			}
		case !slices.Contains(rest, string(st)):
			rest = append(rest, string(st))
		}
	}
	return start, rest
}
