// Package conformance proves that a store honours the runstate contract.
//
// Every check has a stable rule ID (FSM-001, CAS-002, LEASE-005, …) that
// docs/spec.md defines. A driver runs the whole suite with one line in its
// tests:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, target) }
//
// go test is only one front end: RunRules runs the same checks anywhere and
// returns structured results, which cmd/conformance-runner turns into reports.
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// Version is the suite's version, stamped on reports.
const Version = "1.0.0"

// Capabilities are the optional features a target declares. Checks that need
// a capability the target does not declare are skipped, never passed.
type Capabilities struct {
	// Leases: the store implements runstate.LeaseStore.
	Leases bool `json:"leases"`
	// SecondHandle: Harness.OpenHandle opens an independent handle on the
	// same data (another connection pool or process), as a second worker would.
	SecondHandle bool `json:"second_handle"`
	// ControlledClock: Harness.Advance moves the store's clock, so checks
	// about time need not sleep. Without it they sleep in real time.
	ControlledClock bool `json:"controlled_clock"`
	// Faults: the harness implements FaultInjector and can cause these.
	// In a rule's Requires, the faults of which the check needs one: it
	// runs under each that the target declares.
	Faults []Fault `json:"faults,omitempty"`
}

// String lists the capabilities as reports show them:
// "leases=true second_handle=false controlled_clock=false faults=restart".
func (c Capabilities) String() string {
	faults := "none"
	if len(c.Faults) > 0 {
		names := make([]string, len(c.Faults))
		for i, f := range c.Faults {
			names[i] = string(f)
		}
		faults = strings.Join(names, ",")
	}
	return fmt.Sprintf("leases=%v second_handle=%v controlled_clock=%v faults=%s", c.Leases, c.SecondHandle, c.ControlledClock, faults)
}

func (c Capabilities) missing(need Capabilities) []string {
	var out []string
	if need.Leases && !c.Leases {
		out = append(out, "leases")
	}
	if need.SecondHandle && !c.SecondHandle {
		out = append(out, "second_handle")
	}
	if need.ControlledClock && !c.ControlledClock {
		out = append(out, "controlled_clock")
	}
	if len(need.Faults) > 0 && !slices.ContainsFunc(need.Faults, func(f Fault) bool { return slices.Contains(c.Faults, f) }) {
		var names []string
		for _, f := range need.Faults {
			names = append(names, string(f))
		}
		out = append(out, "faults ("+strings.Join(names, " or ")+")")
	}
	return out
}

// Harness gives one check a fresh, empty store.
type Harness interface {
	// Store returns the handle the check uses.
	Store() runstate.RunStateStore
	// OpenHandle opens another handle on the same data. Called only when the
	// target declares SecondHandle; the harness closes it in Close.
	OpenHandle(ctx context.Context) (runstate.RunStateStore, error)
	// Advance moves the store's clock forward. Called only when the target
	// declares ControlledClock.
	Advance(d time.Duration)
	// Close releases everything the harness made.
	Close(ctx context.Context) error
}

// Target is a store under test: how to make a harness, and what it declares.
type Target struct {
	// Name and StoreVersion identify the store in reports.
	Name         string
	StoreVersion string
	Capabilities Capabilities
	// NewHarness makes a harness around a fresh, empty store; it is called once per check.
	NewHarness func(ctx context.Context) (Harness, error)
	// LeaseTTL is the lease duration that checks use; with a real clock keep
	// it short (default 300ms) but long enough for a claim to round-trip.
	LeaseTTL time.Duration
	// CheckTimeout bounds one check (default 2 minutes).
	CheckTimeout time.Duration
	// LinOps is how many operations a LIN check records at most (default
	// 10,000, the most a check records; below 2,000, too few for a verdict,
	// it is raised to 2,000). A suite that repeats the LIN rules on a
	// target another suite checks with the default may record fewer.
	LinOps int
	// AllowStoredRuns lets checks run on a store that holds runs already.
	// Checks create runs and claim runnable ones, so by default a check
	// whose store is not empty ends with Error before it writes: the
	// harness may have been pointed at a real database.
	AllowStoredRuns bool
	// Principal, when set, is the principal the target records on every
	// write whatever principal the call names (AUD-010): a gateway sets it
	// from the caller's credentials. Checks then expect it in every event.
	Principal string
}

// LinOpsRepeated is Target.LinOps of a suite that repeats the rules on a
// store another suite checks with the default: the same store on a real
// clock, behind a gateway or a plugin process, or with a member down.
const LinOpsRepeated = 2_500

// Repeated returns target with LinOps set to LinOpsRepeated.
func Repeated(target Target) Target {
	target.LinOps = LinOpsRepeated
	return target
}

// ErrStoreNotEmpty reports a harness whose store holds runs already;
// checked with errors.Is.
var ErrStoreNotEmpty = errors.New("the store is not empty")

// CheckEmpty makes one harness of target, as a check would, and reports
// ErrStoreNotEmpty when its store holds runs. It writes nothing: a runner
// calls it before the first check, so that a store pointed at real data is
// refused before anything is written to it.
func CheckEmpty(ctx context.Context, target Target) error {
	h, err := target.NewHarness(ctx)
	if err != nil {
		return err
	}
	err = storeIsEmpty(ctx, h.Store())
	return errors.Join(err, h.Close(ctx))
}

func storeIsEmpty(ctx context.Context, st runstate.RunStateStore) error {
	page, err := st.ListRuns(ctx, runstate.ListRunsParams{Limit: 1})
	if err != nil {
		return fmt.Errorf("listing the store's runs to see that it is empty: %w", err)
	}
	if len(page.Runs) > 0 {
		return fmt.Errorf("%w: it holds run %s (and maybe more)", ErrStoreNotEmpty, page.Runs[0].RunID)
	}
	return nil
}

// Outcome is the verdict of one check.
type Outcome string

// Outcomes.
const (
	Pass Outcome = "pass"
	Fail Outcome = "fail"
	// Skip: the target does not declare a capability the check needs, or
	// its store lacks the optional interface the rule is about.
	Skip Outcome = "skip"
	// Error: the harness itself broke (could not make a store, a check panicked).
	Error Outcome = "error"
)

// Failure is one broken expectation.
type Failure struct {
	Rule     string `json:"rule"`
	Expected string `json:"expected"`
	Seen     string `json:"seen"`
}

func (f Failure) String() string {
	return fmt.Sprintf("%s: expected %s; saw %s", f.Rule, f.Expected, f.Seen)
}

// Result is the outcome of one rule.
type Result struct {
	Rule     Rule      `json:"rule"`
	Outcome  Outcome   `json:"outcome"`
	Failures []Failure `json:"failures,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	// Lacks names, for a check that skipped because the store lacks an
	// optional interface, that interface ("runstate.BatchCreator");
	// Detail then says what the store does without it.
	Lacks    string        `json:"lacks,omitempty"`
	Duration time.Duration `json:"-"` // duration_seconds in JSON
	// Attachments are files a check made to explain its result, such as
	// the visualisation of a history that is not linearizable.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// MarshalJSON writes the duration in seconds, as every duration runstate
// prints.
func (r Result) MarshalJSON() ([]byte, error) {
	type fields Result
	return json.Marshal(struct {
		fields
		DurationSeconds float64 `json:"duration_seconds"`
	}{fields(r), r.Duration.Seconds()})
}

// Attachment is a file a check made; reports write it next to themselves.
type Attachment struct {
	Name string `json:"name"`
	Data []byte `json:"-"`
	// Path is where a report wrote the file; empty until one has.
	Path string `json:"path,omitempty"`
}

// RunRules runs rules against target one after another, calling progress
// (when non-nil) after each, and returns the results in order.
func RunRules(ctx context.Context, target Target, rules []Rule, progress func(Result)) []Result {
	results := make([]Result, 0, len(rules))
	for _, r := range rules {
		res := RunRule(ctx, target, r)
		if progress != nil {
			progress(res)
		}
		results = append(results, res)
	}
	return results
}

// RunRule runs one rule against a fresh harness of target.
func RunRule(ctx context.Context, target Target, rule Rule) Result {
	start := time.Now()
	res := runRule(ctx, target, rule)
	res.Rule, res.Duration = rule, time.Since(start)
	return res
}

func runRule(ctx context.Context, target Target, rule Rule) Result {
	if miss := target.Capabilities.missing(rule.Requires); len(miss) > 0 {
		return Result{Outcome: Skip, Detail: "needs capability " + strings.Join(miss, ", ")}
	}
	timeout := target.CheckTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := target.NewHarness(ctx)
	if err != nil {
		return Result{Outcome: Error, Detail: "harness: " + err.Error()}
	}
	if !target.AllowStoredRuns {
		if err := storeIsEmpty(ctx, h.Store()); err != nil {
			h.Close(context.WithoutCancel(ctx))
			detail := "harness: " + err.Error()
			if errors.Is(err, ErrStoreNotEmpty) {
				detail += "; a check creates and claims runs, so it runs only on an empty store: give every check its own " +
					"(with a plugin, {{tempdir}} or {{unique}} in its configuration), or the runs may be an earlier check's"
			}
			return Result{Outcome: Error, Detail: detail}
		}
	}
	c := newC(ctx, target, rule, h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				c.broke(fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		rule.check(c)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		why := fmt.Sprintf("check did not finish within %v", timeout)
		if parent.Err() != nil {
			why = "check cancelled: " + parent.Err().Error()
		}
		c.broke(why)
		// Its calls carry the cancelled context, so a check normally ends
		// at once. The harness is closed only after it has: closing a store
		// under a running check would turn its next call into a crash or a
		// false verdict. A check that does not end is abandoned with its
		// harness open.
		select {
		case <-done:
		case <-time.After(abandonAfter):
			c.mu.Lock()
			c.harnessErr = fmt.Sprintf("%s, and did not stop within %v of being cancelled: abandoned, with its store left open until it stops", why, abandonAfter)
			c.mu.Unlock()
			go func() { <-done; h.Close(context.WithoutCancel(ctx)) }()
			return c.result()
		}
	}
	if err := h.Close(context.WithoutCancel(ctx)); err != nil {
		c.broke("closing harness: " + err.Error())
	}
	return c.result()
}

// abandonAfter is how long a cancelled check may take to stop.
var abandonAfter = 10 * time.Second

// result is the verdict so far; an abandoned check may still add to c.
func (c *checkState) result() Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{Outcome: Pass, Detail: strings.Join(c.notes, "; "), Attachments: slices.Clone(c.attachments)}
	switch {
	case c.harnessErr != "":
		res.Outcome, res.Detail, res.Failures = Error, c.harnessErr, slices.Clone(c.failures)
	case len(c.failures) > 0:
		res.Outcome, res.Failures = Fail, slices.Clone(c.failures)
	case c.skipped != "":
		res.Outcome, res.Detail, res.Lacks = Skip, c.skipped, c.lacks
	}
	return res
}

// checkState is what a check works with: the store, helpers, and failure reporting.
// Failing methods are safe to call from several goroutines; Fatalf ends
// only the goroutine that calls it, like testing.T.FailNow.
type checkState struct {
	ctx    context.Context
	target Target
	rule   Rule
	h      Harness
	store  runstate.RunStateStore

	mu          sync.Mutex
	failures    []Failure
	harnessErr  string
	skipped     string // why the check skipped itself: the store lacks an optional interface
	lacks       string // that interface
	notes       []string
	attachments []Attachment

	secondMu sync.Mutex // guards other; not mu, which failure reports take
	other    runstate.RunStateStore
}

// note records what a passing check measured, for the report.
func (c *checkState) note(detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, detail)
}

// attach records a file that explains the check's result.
func (c *checkState) attach(name string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attachments = append(c.attachments, Attachment{Name: name, Data: data})
}

func newC(ctx context.Context, target Target, rule Rule, h Harness) *checkState {
	return &checkState{ctx: ctx, target: target, rule: rule, h: h, store: h.Store()}
}

// Errorf records a failure of the check's rule: what the rule expects and
// what the store did.
func (c *checkState) Errorf(expected, seenFormat string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, Failure{Rule: c.rule.ID, Expected: expected, Seen: fmt.Sprintf(seenFormat, args...)})
}

// Fatalf records a failure and ends the calling goroutine.
func (c *checkState) Fatalf(expected, seenFormat string, args ...any) {
	c.Errorf(expected, seenFormat, args...)
	runtime.Goexit()
}

func (c *checkState) broke(detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.harnessErr == "" {
		c.harnessErr = detail
	}
}

// skip ends the check as skipped, saying what the store lacks; never as
// passed.
func (c *checkState) skip(l lack) {
	c.mu.Lock()
	c.skipped, c.lacks = l.why, l.iface
	c.mu.Unlock()
	runtime.Goexit()
}

// A lack is an optional interface a check needs and the store does not
// have: iface names it as runstate does, and why says, in terms of what a
// store's author wrote or can add, what the store does without it. Skip
// reasons name no Go type of the store's: a store the kit makes, or one
// behind a plugin or a gateway, is a wrapper whose type tells its author
// nothing.
type lack struct{ iface, why string }

var (
	lackBatchCreator = lack{"runstate.BatchCreator", "the store creates runs one at a time: it has no batch create, all runs or none " +
		"(runstate.BatchCreator; driver.Wrap gives it to a driver that implements driver.BatchInserter)"}
	lackBatchUpdater = lack{"runstate.BatchUpdater", "the store updates runs one at a time: it has no batch update " +
		"(runstate.BatchUpdater; driver.Wrap gives it to every driver, a store of your own implements it)"}
	lackBatchClaimer = lack{"runstate.BatchClaimer", "the store claims runs one at a time: it has no batch claim " +
		"(runstate.BatchClaimer; driver.Wrap gives it to every driver, a store of your own implements it)"}
	lackAnyBatch = lack{"runstate.BatchCreator, BatchUpdater or BatchClaimer", "the store has no batch calls at all: no batch create, update or claim " +
		"(runstate.BatchCreator, BatchUpdater, BatchClaimer; driver.Wrap gives every driver the last two)"}
	lackLeaseReader = lack{"runstate.LeaseReader", "the store cannot be asked for a run's lease: it has no GetLease " +
		"(runstate.LeaseReader; driver.Wrap gives it to every driver, a store of your own implements it)"}
	lackRunWatcher = lack{"runstate.RunWatcher", "the store does not wake the watchers of a run, so followers poll: it has no WatchRun " +
		"(runstate.RunWatcher, which driver.Wrap does not give: the store adds WatchRun beside the kit's methods, with driver.RunNotices within one process)"}
	lackRemoteRunWatcher = lack{"runstate.RunWatcher", "the store does not wake the watchers of a run, so followers poll: " +
		"the plugin or gateway it is reached through offers no WatchRun (its store has no runstate.RunWatcher)"}
)

// harnessFatal records a harness error and ends the calling goroutine.
func (c *checkState) harnessFatal(format string, args ...any) {
	c.broke(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
