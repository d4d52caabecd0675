package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/tracker"
	"github.com/spf13/cobra"
)

// labelWorkflowFile names the workflow file a queued run executes; workers
// read it from there (the file must be where every worker can read it).
const labelWorkflowFile = "runstate/workflow-file"

// newRoot builds the demo-runner command tree; g and o receive the flags.
func newRoot(g *globals, o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "demo-runner",
		Short: "Run workflow files on a runstate store",
		Long:  rootLong,
		Example: `  demo-runner run examples/workflows/hello.yaml
  demo-runner submit --priority 5 examples/workflows/approval.yaml
  demo-runner worker --store mysql:runner@tcp(db:3306)/runs
  RUNSTATE_STORE='mysql:runner:secret@tcp(db:3306)/runs' demo-runner list --status running`,
	}
	addGlobalFlags(root.PersistentFlags(), g)
	// withApp runs fn once the global flags are checked and the store is
	// open as the command's role needs it.
	withApp := func(r func() role, fn func(ctx context.Context, a *app, args []string) error) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, args []string) error {
			if err := g.check(); err != nil {
				return err
			}
			a, err := start(c.Context(), *g, r(), c.OutOrStdout(), c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer a.close()
			return fn(c.Context(), a, args)
		}
	}
	queries := func() role { return role{opensStore: true} }
	runFlags := func(c *cobra.Command) {
		o.labels = kvFlag{}
		c.Flags().IntVar(&o.priority, "priority", 0, "priority: larger runs first")
		c.Flags().Var(o.labels, "label", "label key=value (repeatable)")
	}
	cmds := []*cobra.Command{
		{
			Use:   "run FILE",
			Short: "Run a workflow in the foreground, with live progress",
			Long: `Run creates a run of the workflow FILE and executes it in this process, under a lease
that keeps other workers off it, printing RUN_ID STATUS at the end. Crash recovery runs
first. Ctrl-C interrupts the run (a run waiting in a wait step is left waiting).`,
			Example: `  demo-runner run examples/workflows/hello.yaml
  demo-runner run --label team=web examples/workflows/flaky.yaml`,
			Args: cli.ExactArgs("FILE"),
			RunE: withApp(executes, func(ctx context.Context, a *app, args []string) error {
				run, err := a.createFromFile(ctx, args, o)
				if err != nil {
					return err
				}
				return a.runForeground(ctx, run)
			}),
		},
		{
			Use:   "submit FILE",
			Short: "Queue a run of a workflow for a worker",
			Long: `Submit queues a run of the workflow FILE and prints its run id. A worker claims it by
priority (larger first), then by age. The file must be readable at the same absolute path
by the workers.`,
			Example: `  demo-runner submit examples/workflows/approval.yaml
  demo-runner submit examples/workflows/hello.yaml --priority 10 --label team=web`,
			Args: cli.ExactArgs("FILE"),
			RunE: withApp(queries, func(ctx context.Context, a *app, args []string) error {
				run, err := a.createFromFile(ctx, args, o)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, run.RunID)
				return nil
			}),
		},
		{
			Use:   "worker",
			Short: "Take queued runs by lease and run them until stopped",
			Long: `Worker claims runnable runs one at a time and executes them, renewing the lease on the
run in hand. Any number of workers, on any number of machines, share one store. On SIGTERM
the run in hand may finish within --grace, then it is interrupted. Crash recovery runs at
start and every --recover-every.`,
			Example: `  demo-runner worker
  demo-runner worker --once                      # stop when nothing is runnable
  demo-runner worker --recovery takeover --statuses queued,waiting,running`,
			Args: cli.ExactArgs(),
			RunE: withApp(executes, func(ctx context.Context, a *app, args []string) error {
				if o.recoverEvery > 0 && !o.once {
					// Recovery lives as long as the worker loop, and ends before
					// the store closes, however the loop ends.
					rctx, stopRecovery := context.WithCancel(ctx)
					recovering := make(chan struct{})
					go func() { defer close(recovering); a.recoverPeriodically(rctx, o.recoverEvery) }()
					defer func() { stopRecovery(); <-recovering }()
				}
				if o.metricsAddr != "" {
					lis, err := net.Listen("tcp", o.metricsAddr)
					if err != nil {
						return exitError{Code: exitFailure, Msg: fmt.Sprintf("--metrics-addr: %v", err)}
					}
					a.log.Info("serving metrics", "addr", lis.Addr().String())
					mctx, stopMetrics := context.WithCancel(ctx)
					serving := make(chan struct{})
					go func() { defer close(serving); a.serveMetrics(mctx, lis) }()
					defer func() { stopMetrics(); <-serving }()
				}
				return a.worker(ctx, strings.Split(o.statuses, ","), o.poll, o.grace, o.once)
			}),
		},
		{
			Use:     "status RUN_ID",
			Short:   "Print a run's snapshot, with steps and hosts (JSON)",
			Example: `  demo-runner status 01JD3Y8M4V6K0W7A2B9C5E1F3G`,
			Args:    cli.ExactArgs("RUN_ID"),
			RunE: withApp(queries, func(ctx context.Context, a *app, args []string) error {
				run, err := a.runs.GetRun(ctx, args[0])
				if err != nil {
					return storeError(err)
				}
				return a.printJSON(run)
			}),
		},
		{
			Use:   "list",
			Short: "List runs, newest first (JSON)",
			Long: `List prints a page of runs, newest first, as {"runs": [...], "next_cursor": "..."}; pass
next_cursor to --cursor for the next page. Filters combine.`,
			Example: `  demo-runner list --status running,waiting --label team=web --limit 20
  demo-runner list --workflow approval --cursor NEXT_CURSOR`,
			Args: cli.ExactArgs(),
			RunE: withApp(queries, func(ctx context.Context, a *app, args []string) error {
				page, err := a.runs.ListRuns(ctx, o.list.params())
				if err != nil {
					return storeError(err)
				}
				return a.printJSON(newRunList(page))
			}),
		},
		{
			Use:     "audit RUN_ID",
			Short:   "Print a run's audit trail (JSON)",
			Example: `  demo-runner audit 01JD3Y8M4V6K0W7A2B9C5E1F3G`,
			Args:    cli.ExactArgs("RUN_ID"),
			RunE: withApp(queries, func(ctx context.Context, a *app, args []string) error {
				events, err := a.auditTrail(ctx, args[0])
				if err != nil {
					return storeError(err)
				}
				return a.printJSON(events)
			}),
		},
		{
			Use:   "cancel RUN_ID",
			Short: "Cancel a run",
			Long: `Cancel ends a run that has not finished as canceled, with --reason in its audit trail. The
worker executing it notices within its --renew and stops the step's commands.`,
			Example: `  demo-runner cancel 01JD3Y8M4V6K0W7A2B9C5E1F3G --reason "wrong branch"`,
			Args:    cli.ExactArgs("RUN_ID"),
			RunE: withApp(queries, func(ctx context.Context, a *app, args []string) error {
				return a.printMove(a.operator.Cancel(ctx, args[0], o.reason))
			}),
		},
		{
			Use:   "signal RUN_ID",
			Short: "Resume a run waiting in a wait step",
			Long: `Signal resumes a run waiting in a wait step: the worker holding it goes on at once, or
the next worker to claim it.`,
			Example: `  demo-runner signal 01JD3Y8M4V6K0W7A2B9C5E1F3G`,
			Args:    cli.ExactArgs("RUN_ID"),
			RunE: withApp(queries, func(ctx context.Context, a *app, args []string) error {
				run, err := a.operator.Signal(ctx, args[0])
				if err == nil {
					a.log.Info("run signalled: the worker holding it resumes it (or the next worker to claim it)", "run_id", args[0])
				}
				return a.printMove(run, err)
			}),
		},
		{
			Use:   "retry RUN_ID",
			Short: "Run again, as a new run, a finished run whose diagnostic allows it",
			Long: `Retry creates a new run of a finished, unsuccessful run's workflow, with retry_of set to
RUN_ID and the attempt counted up, and runs it in the foreground (--queue: only queues it).`,
			Example: `  demo-runner retry 01JD3Y8M4V6K0W7A2B9C5E1F3G
  demo-runner retry 01JD3Y8M4V6K0W7A2B9C5E1F3G --queue`,
			Args: cli.ExactArgs("RUN_ID"),
			RunE: withApp(func() role {
				if o.queueOnly {
					return role{opensStore: true}
				}
				return executes()
			}, func(ctx context.Context, a *app, args []string) error {
				return a.retry(ctx, args[0], o.queueOnly)
			}),
		},
		{
			Use:   "recover",
			Short: "Run crash recovery now and print its report (JSON)",
			Long: `Recover settles the runs that processes which died left behind, under --recovery, and
prints what it did. Runs that live workers hold are never touched.`,
			Example: `  demo-runner recover --recovery fail`,
			Args:    cli.ExactArgs(),
			RunE: withApp(func() role { return role{opensStore: true, recover: true} }, func(ctx context.Context, a *app, args []string) error {
				return a.printJSON(a.recovery) // start recovered
			}),
		},
		{
			Use:   "serve",
			Short: "Serve the HTTP JSON API, Prometheus /metrics and /healthz",
			Long: `Serve answers the HTTP API (docs/demo-runner.md; its OpenAPI description at
/openapi.json), Prometheus metrics at /metrics and a health check at /healthz.`,
			Example: `  demo-runner serve --addr 127.0.0.1:8080`,
			Args:    cli.ExactArgs(),
			RunE: withApp(holds, func(ctx context.Context, a *app, args []string) error {
				return a.serve(ctx, o.addr)
			}),
		},
		{
			Use:     "deadletters",
			Short:   "List webhook notifications that could not be delivered (JSON)",
			Example: `  demo-runner deadletters --data-dir .runstate`,
			Args:    cli.ExactArgs(),
			RunE: withApp(func() role { return role{} }, func(ctx context.Context, a *app, args []string) error {
				list, err := a.dead.List()
				if err != nil {
					return exitError{Code: exitFailure, Msg: err.Error()}
				}
				if list == nil {
					list = []tracker.DeadLetter{}
				}
				return a.printJSON(list)
			}),
		},
	}
	byName := map[string]*cobra.Command{}
	for _, c := range cmds {
		byName[c.Name()] = c
		root.AddCommand(c)
	}
	runFlags(byName["run"])
	byName["submit"].Flags().AddFlagSet(byName["run"].Flags())
	w := byName["worker"].Flags()
	w.StringVar(&o.statuses, "statuses", "queued,waiting", "statuses this worker claims (add running under the takeover policy)")
	w.DurationVar(&o.poll, "poll", time.Second, "how often an idle worker looks for runs")
	w.DurationVar(&o.grace, "grace", 30*time.Second, "on SIGTERM, how long the run in hand may take to finish before it is interrupted")
	w.BoolVar(&o.once, "once", false, "stop when no run is runnable")
	w.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address while the worker runs (off when empty)")
	w.DurationVar(&o.recoverEvery, "recover-every", time.Minute,
		"how often the worker also runs crash recovery, for runs that workers which died and were not restarted left behind (0: only at start)")
	byName["worker"].PreRunE = func(*cobra.Command, []string) error {
		return o.checkWorker()
	}
	l := byName["list"].Flags()
	o.list.labels = kvFlag{}
	l.StringVar(&o.list.statuses, "status", "", "statuses, comma-separated")
	l.StringVar(&o.list.workflow, "workflow", "", "workflow name")
	l.Var(o.list.labels, "label", "label key=value (repeatable)")
	l.IntVar(&o.list.limit, "limit", 20, "page size")
	l.StringVar(&o.list.cursor, "cursor", "", "next_cursor of the previous page")
	byName["cancel"].Flags().StringVar(&o.reason, "reason", "canceled by an operator", "why, for the audit trail")
	byName["retry"].Flags().BoolVar(&o.queueOnly, "queue", false, "only queue the new run, for a worker")
	byName["serve"].Flags().StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	completeFlags(root, byName)
	return root
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &globals{pluginConfig: kvFlag{}}
	return cli.Execute(ctx, newRoot(g, &options{}), args, stdout, stderr, exitUsage)
}

// Roles of the commands that are not plain queries.
var (
	executes = func() role { return role{opensStore: true, hold: true, recover: true} }
	holds    = func() role { return role{opensStore: true, hold: true} }
)

// options are the subcommands' flags; one invocation parses one command's.
type options struct {
	priority     int
	labels       kvFlag
	queueOnly    bool
	once         bool
	statuses     string
	reason       string
	addr         string
	metricsAddr  string
	poll, grace  time.Duration
	recoverEvery time.Duration
	list         listOptions
}

// checkWorker checks the worker's flags before anything opens.
func (o *options) checkWorker() error {
	switch {
	case o.recoverEvery < 0:
		return usageError("--recover-every %v: want 0 (only at start) or a positive duration", o.recoverEvery)
	case o.poll <= 0:
		return usageError("--poll %v: want a positive duration, such as 1s", o.poll)
	case o.grace < 0:
		return usageError("--grace %v: want 0 (interrupt at once) or a positive duration", o.grace)
	}
	for _, s := range strings.Split(o.statuses, ",") {
		if !slices.Contains([]runstate.RunStatus{runstate.StatusQueued, runstate.StatusWaiting, runstate.StatusRunning}, runstate.RunStatus(s)) {
			return usageError("--statuses %q: %q is not claimable; want queued, waiting or running, comma-separated", o.statuses, s)
		}
	}
	return nil
}

// listOptions are the list command's filters, also sent through the API.
type listOptions struct {
	statuses, workflow, cursor string
	labels                     kvFlag
	limit                      int
}

func (l listOptions) params() runstate.ListRunsParams {
	p := runstate.ListRunsParams{WorkflowName: l.workflow, Labels: l.labels, Limit: l.limit, Cursor: l.cursor}
	if l.statuses != "" {
		p.Statuses = strings.Split(l.statuses, ",")
	}
	return p
}

func workflowArg(args []string) (string, workflow.Workflow, error) {
	if len(args) != 1 {
		return "", workflow.Workflow{}, usageError("name one workflow file")
	}
	path, err := filepath.Abs(args[0])
	if err != nil {
		return "", workflow.Workflow{}, usageError("%v", err)
	}
	wf, err := workflow.Load(path)
	if err != nil {
		return "", wf, usageError("%v", err)
	}
	return path, wf, nil
}

// createFromFile queues a run of the workflow file named in args.
func (a *app) createFromFile(ctx context.Context, args []string, o *options) (runstate.RunSnapshot, error) {
	path, wf, err := workflowArg(args)
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return a.create(ctx, path, wf, o.priority, o.labels, "")
}

// create queues a run of the workflow at path.
func (a *app) create(ctx context.Context, path string, wf workflow.Workflow, priority int, labels map[string]string, retryOf string) (runstate.RunSnapshot, error) {
	l := map[string]string{labelWorkflowFile: path}
	for k, v := range labels {
		l[k] = v
	}
	run, err := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: wf.Name, Priority: priority, Labels: l,
		Steps: wf.StepSpecs(), RetryOf: retryOf, Reason: "submitted with demo-runner"})
	if err != nil {
		return run, storeError(err)
	}
	a.log.Info("run created", "run_id", run.RunID, "workflow", wf.Name, "priority", priority)
	return run, nil
}

// runForeground claims a run this process just created and executes it.
func (a *app) runForeground(ctx context.Context, run runstate.RunSnapshot) error {
	var token int64
	if a.leases != nil {
		cl, err := a.leases.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: a.owner, TTL: a.g.lease})
		if errors.Is(err, runstate.ErrLeaseHeld) || errors.Is(err, runstate.ErrNotClaimable) {
			// On a shared store a worker claimed the new run first (and may
			// have begun or even finished it): it runs there.
			now := run.Status
			if cur, gerr := a.runs.GetRun(ctx, run.RunID); gerr == nil {
				now = cur.Status
			}
			a.log.Info("a worker took the run before this process could; it runs there", "run_id", run.RunID, "status", now)
			fmt.Fprintf(a.stdout, "%s %s\n", run.RunID, now)
			return nil
		}
		if err != nil {
			return storeError(err)
		}
		run, token = cl.Run, cl.Lease.Token
	}
	final, err := a.execute(ctx, run, token, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s %s\n", final.RunID, final.Status)
	if final.Status != runstate.StatusSuccess {
		return exitError{Code: exitRunFailed}
	}
	return nil
}

// execute runs a claimed run under its lease, which the tracker keeps
// renewed. When ctx ends (a signal), a run waiting in a wait step is left
// waiting at once; anything else may go on for grace and is then
// interrupted. A lost lease stops the work at once: another worker owns
// the run now. A run someone else ended stops it too.
func (a *app) execute(ctx context.Context, run runstate.RunSnapshot, token int64, grace time.Duration) (runstate.RunSnapshot, error) {
	tr, err := a.tracker.Attach(run, tracker.Lease{Token: token, TTL: a.g.lease})
	if err != nil {
		return run, exitError{Code: exitFailure, Msg: err.Error()}
	}
	wf, err := workflow.Load(run.Labels[labelWorkflowFile])
	if err != nil {
		return a.unreadable(ctx, tr, token, err)
	}
	work, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	park := make(chan struct{})
	go func() { // the signal: waits park at once; the rest gets the grace period
		select {
		case <-ctx.Done():
		case <-work.Done():
			return
		}
		a.log.Info("stopping: the run in hand may finish within the grace period, then it is interrupted (a waiting run is released at once)",
			"run_id", run.RunID, "grace", grace)
		close(park)
		select {
		case <-time.After(grace):
			stopWork(errShutdown)
		case <-work.Done():
		}
	}()
	keeping := make(chan struct{})
	go func() { defer close(keeping); tr.KeepLease(work, a.g.renew, stopWork) }()
	err = workflow.Execute(work, tr, wf, workflow.Options{Park: park, Supervisor: a.supervisor,
		Progress: func(f string, args ...any) { a.log.Info(fmt.Sprintf(f, args...)) }})
	// Why the work ended, read before this function ends it itself.
	cause := context.Cause(work)
	stopWork(nil)
	<-keeping
	status := tr.Snapshot().Status
	switch {
	case err == nil:
		// The workflow reached its end (whatever stopped the work after that).
	case errors.Is(err, workflow.ErrLeaseLapsed):
		// The worker could not renew in time, so a step's command was ended.
		// If the run is still this worker's, it is settled as crash recovery
		// would settle it under the fleet's policy.
		a.log.Warn("the lease was not renewed in time: the step's command was ended", "run_id", run.RunID, "token", token)
		a.settleLapsed(tr)
	case errors.Is(cause, runstate.ErrLeaseLost) || errors.Is(err, runstate.ErrLeaseLost):
		return tr.Snapshot(), a.leaseLost(run.RunID, token)
	case errors.Is(cause, tracker.ErrRunEnded) || errors.Is(err, tracker.ErrRunEnded):
		a.log.Info("the run was ended elsewhere", "run_id", run.RunID, "detail", cmp.Or(err, cause))
	case status == runstate.StatusWaiting && (errors.Is(err, workflow.ErrParked) || errors.Is(cause, errShutdown)):
		// Waiting is not executing: the run is left as it is, for the
		// next worker to claim (after a signal it goes on at once).
		a.log.Info("leaving the run waiting for a signal: a worker continues it", "run_id", run.RunID)
	case errors.Is(cause, errShutdown) && status == runstate.StatusRunning:
		a.log.Warn("stopping before the run finished: interrupting it", "run_id", run.RunID)
		if ierr := tr.Interrupt(context.Background(), "WORKER_SHUTDOWN: the worker stopped before the run finished"); ierr != nil {
			a.log.Error("could not interrupt the run", "run_id", run.RunID, "error", ierr)
		}
	case errors.Is(cause, errShutdown) && status == runstate.StatusQueued:
		a.log.Info("stopping before the run began: leaving it for another worker", "run_id", run.RunID)
	default:
		// The store failed under the run: write nothing more, and let the
		// run go so that another worker or recovery can settle it.
		a.log.Error("the run stopped on a store error; releasing it", "run_id", run.RunID, "error", err)
		if errors.Is(a.release(run.RunID, token), runstate.ErrLeaseLost) {
			// The store answered again, and the run is another worker's:
			// this worker stalled or was cut off past its lease.
			return tr.Snapshot(), a.leaseLost(run.RunID, token)
		}
		return tr.Snapshot(), storeError(err)
	}
	a.release(run.RunID, token)
	final, _ := tr.Refresh(context.Background())
	a.metrics.observeFinished(final)
	return final, nil
}

func claimResult(err error) string {
	switch {
	case err == nil:
		return claimClaimed
	case errors.Is(err, runstate.ErrNotFound):
		return claimEmpty
	}
	return claimError
}

// leaseLost reports that another worker owns the run now.
func (a *app) leaseLost(runID string, token int64) error {
	a.log.Warn("the lease on the run was lost: another worker owns it now; stopping without writing", "run_id", runID, "token", token)
	return exitError{Code: exitFailure, Msg: "lease lost on run " + runID}
}

// settleLapsed ends a run whose step command was ended because the lease
// was not renewed in time, as recovery would under --recovery: under
// takeover it is left running for another worker; otherwise it is
// interrupted (fenced: only while the lease is still this worker's).
func (a *app) settleLapsed(tr *tracker.Run) {
	if runstate.RecoveryPolicy(a.g.policy) == runstate.RecoverTakeover {
		return
	}
	err := tr.Interrupt(context.Background(), "LEASE_LAPSED: the worker could not renew its lease in time, so the step's command was ended")
	if err != nil {
		a.log.Warn("could not interrupt the run (another worker may own it now)", "run_id", tr.Snapshot().RunID, "error", err)
	}
}

// unreadable ends a run whose workflow file cannot be read: failed, with a
// diagnostic, through the statuses the table allows.
func (a *app) unreadable(ctx context.Context, tr *tracker.Run, token int64, cause error) (runstate.RunSnapshot, error) {
	ctx = context.WithoutCancel(ctx)
	var err error
	switch tr.Snapshot().Status {
	case runstate.StatusQueued:
		err = tr.Begin(ctx)
	case runstate.StatusWaiting:
		err = tr.Resume(ctx, "")
	}
	if err == nil {
		err = tr.Finish(ctx, runstate.StatusFailed, &runstate.Diagnostic{ErrorCode: "WORKFLOW_UNREADABLE", Message: cause.Error()}, "")
	}
	if err != nil {
		return tr.Snapshot(), storeError(err)
	}
	a.release(tr.Snapshot().RunID, token)
	return tr.Snapshot(), nil
}

var errShutdown = errors.New("the process is shutting down")

func (a *app) release(runID string, token int64) error {
	if token == 0 || a.leases == nil {
		return nil
	}
	err := a.leases.ReleaseLease(context.Background(), runstate.ReleaseLeaseParams{RunID: runID, Token: token})
	if err != nil && !errors.Is(err, runstate.ErrLeaseLost) {
		a.log.Warn("could not release the lease", "run_id", runID, "error", err)
	}
	return err
}

// worker claims runnable runs and executes them until ctx ends.
// recoverPeriodically runs crash recovery every interval until ctx ends. A
// worker that died and was not restarted leaves its running run behind
// with an expired lease; under the interrupt and fail policies no worker
// claims such a run, so without this it would wait for the next start or
// an operator's recover. Recovery never touches a run a live lease holds,
// this worker's own included, so it is safe beside the work in hand.
func (a *app) recoverPeriodically(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := a.recoverRuns(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("periodic crash recovery failed; it runs again at the next interval", "error", err)
		}
	}
}

func (a *app) worker(ctx context.Context, statuses []string, poll, grace time.Duration, once bool) error {
	if a.leases == nil {
		return exitError{Code: exitFailure, Msg: "the store has no leases: a worker needs them to share runs safely"}
	}
	// A store that announces runnable runs wakes the worker at once; it
	// still polls, for leases that expire and notices that get lost.
	var wake <-chan struct{}
	wakeups := "poll"
	if w, ok := a.leases.(runstate.RunnableWatcher); ok && !once {
		ch, err := w.WatchRunnable(ctx, runstate.WatchRunnableParams{})
		if err != nil {
			a.log.Warn("cannot watch the store for runnable runs; polling only", "error", err)
		} else {
			wake, wakeups = ch, "notify and poll"
		}
	}
	a.log.Info("worker started", "owner", a.owner.String(), "lease", a.g.lease, "renew", a.g.renew, "statuses", statuses,
		"poll", poll, "wakeups", wakeups)
	idle := func() {
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		case _, open := <-wake:
			if !open {
				wake = nil // the watch ended: poll only
			}
		}
	}
	for ctx.Err() == nil {
		began := time.Now()
		cl, err := a.leases.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: a.owner, TTL: a.g.lease, Filter: runstate.RunnableFilter{Statuses: statuses}})
		a.metrics.observeClaim(claimResult(err), time.Since(began))
		switch {
		case errors.Is(err, runstate.ErrNotFound):
			if once {
				return nil
			}
			idle()
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case errors.Is(err, runstate.ErrUnavailable):
			// The store, or the process serving it, is away for a moment.
			a.log.Warn("the store is unavailable; trying again", "error", err)
			idle()
			continue
		case err != nil:
			return storeError(err)
		}
		a.log.Info("claimed run", "run_id", cl.Run.RunID, "token", cl.Lease.Token, "status", cl.Run.Status, "priority", cl.Run.Priority)
		final, err := a.execute(ctx, cl.Run, cl.Lease.Token, grace)
		if err != nil {
			a.log.Error("run stopped", "run_id", cl.Run.RunID, "error", err)
			continue
		}
		if final.Status.Terminal() {
			a.log.Info("run done", "run_id", final.RunID, "status", final.Status)
		} else {
			a.log.Info("run left for another worker", "run_id", final.RunID, "status", final.Status)
		}
	}
	a.log.Info("worker stopped")
	return nil
}

// auditTrail reads a run's whole audit trail.
func (a *app) auditTrail(ctx context.Context, id string) ([]runstate.AuditEvent, error) {
	all := []runstate.AuditEvent{}
	for after := int64(0); ; {
		page, err := a.runs.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id, AfterSeq: after, Limit: runstate.MaxPageLimit})
		if err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if !page.More {
			return all, nil
		}
		after = page.Events[len(page.Events)-1].Seq
	}
}

func (a *app) printMove(run runstate.RunSnapshot, err error) error {
	if err != nil {
		return storeError(err)
	}
	a.metrics.observeFinished(run)
	fmt.Fprintf(a.stdout, "%s %s\n", run.RunID, run.Status)
	return nil
}

// retry starts a new run of a finished run's workflow, pointing at it.
func (a *app) retry(ctx context.Context, id string, queueOnly bool) error {
	old, err := a.runs.GetRun(ctx, id)
	if err != nil {
		return storeError(err)
	}
	switch {
	case !old.Status.Terminal():
		return usageError("run %s is %s: only a finished run can be retried", id, old.Status)
	case old.Status == runstate.StatusSuccess:
		return usageError("run %s succeeded: there is nothing to retry", id)
	case old.Diagnostic != nil && !old.Diagnostic.Retryable:
		return usageError("run %s failed with %s, which its diagnostic marks not retryable", id, old.Diagnostic.ErrorCode)
	}
	path := old.Labels[labelWorkflowFile]
	wf, err := workflow.Load(path)
	if err != nil {
		return exitError{Code: exitFailure, Msg: fmt.Sprintf("the workflow of run %s: %v", id, err)}
	}
	labels := map[string]string{}
	for k, v := range old.Labels {
		if k != tracker.LabelSignal {
			labels[k] = v
		}
	}
	run, err := a.create(ctx, path, wf, old.Priority, labels, old.RunID)
	if err != nil {
		return err
	}
	a.log.Info("retry created", "run_id", run.RunID, "retry_of", old.RunID, "attempt", run.Attempt)
	if queueOnly {
		fmt.Fprintln(a.stdout, run.RunID)
		return nil
	}
	return a.runForeground(ctx, run)
}
