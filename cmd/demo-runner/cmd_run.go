package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// run: run a workflow in the foreground.
func (c commands) run() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a workflow in the foreground, with live progress",
		Long: `Run creates a run of the workflow FILE and executes it in this process, under a lease
that keeps other workers off it, printing RUN_ID STATUS at the end. Crash recovery runs
first. Ctrl-C interrupts the run (a run waiting in a wait step is left waiting).`,
		Example: `  demo-runner run examples/workflows/hello.yaml
  demo-runner run --label team=web examples/workflows/flaky.yaml`,
		Args: cli.ExactArgs("FILE"),
		RunE: c.withApp(executes, func(ctx context.Context, a *app, args []string) error {
			run, err := a.createFromFile(ctx, args, o)
			if err != nil {
				return err
			}
			return a.runForeground(ctx, run)
		}),
	}
	addRunFlags(cmd, o)
	return cmd
}

// addRunFlags adds the flags of a new run, shared by run and submit.
func addRunFlags(cmd *cobra.Command, o *options) {
	if o.labels == nil {
		o.labels = kvFlag{}
	}
	cmd.Flags().IntVar(&o.priority, "priority", 0, "priority: larger runs first")
	cmd.Flags().Var(o.labels, "label", "label key=value (repeatable)")
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

// create queues a run of the workflow at path; a failure has its exit code.
func (a *app) create(ctx context.Context, path string, wf workflow.Workflow, priority int, labels map[string]string, retryOf string) (runstate.RunSnapshot, error) {
	run, err := a.createRun(ctx, path, wf, priority, labels, retryOf)
	if err != nil {
		return run, storeError(err)
	}
	return run, nil
}

// createRun queues a run of the workflow at path, with the store's error.
func (a *app) createRun(ctx context.Context, path string, wf workflow.Workflow, priority int, labels map[string]string, retryOf string) (runstate.RunSnapshot, error) {
	l := map[string]string{labelWorkflowFile: path}
	for k, v := range labels {
		l[k] = v
	}
	run, err := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: wf.Name, Priority: priority, Labels: l,
		Steps: wf.StepSpecs(), RetryOf: retryOf, Reason: "submitted with demo-runner"})
	if err != nil {
		return run, err
	}
	a.log.Info("run created", "run_id", run.RunID, "workflow", wf.Name, "priority", priority)
	return run, nil
}

// runForeground claims a run this process just created and executes it.
func (a *app) runForeground(ctx context.Context, run runstate.RunSnapshot) error {
	var token int64
	var expires time.Time
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
		run, token, expires = cl.Run, cl.Lease.Token, cl.Lease.ExpiresAt
	}
	final, err := a.execute(ctx, executeParams{Run: run, Token: token, Expires: expires, Hold: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s %s\n", final.RunID, final.Status)
	if final.Status != runstate.StatusSuccess {
		return exitError{Code: exitRunFailed}
	}
	return nil
}
