package main

import (
	"context"
	"fmt"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/tracker"
	"github.com/spf13/cobra"
)

// retry: run a finished run's workflow again, as a new run.
func (c commands) retry() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "retry RUN_ID",
		Short: "Run again, as a new run, a finished run whose diagnostic allows it",
		Long: `Retry creates a new run of a finished, unsuccessful run's workflow, with retry_of set to
RUN_ID and the attempt counted up, and runs it in the foreground (--queue: only queues it).`,
		Example: `  demo-runner retry 01JD3Y8M4V6K0W7A2B9C5E1F3G
  demo-runner retry 01JD3Y8M4V6K0W7A2B9C5E1F3G --queue`,
		Args: cli.ExactArgs("RUN_ID"),
		RunE: c.withApp(func() role {
			if o.queueOnly {
				return queries()
			}
			return executes()
		}, func(ctx context.Context, a *app, args []string) error {
			return a.retry(ctx, args[0], o.queueOnly)
		}),
	}
	cmd.Flags().BoolVar(&o.queueOnly, "queue", false, "only queue the new run, for a worker")
	return cmd
}

// retry starts a new run of a finished run's workflow, pointing at it.
func (a *app) retry(ctx context.Context, id string, queueOnly bool) error {
	run, err := a.queueRetry(ctx, id)
	if err != nil {
		return storeError(err)
	}
	if queueOnly {
		fmt.Fprintln(a.stdout, run.RunID)
		return nil
	}
	return a.runForeground(ctx, run)
}

// notRetryable refuses to retry a run that is not finished, succeeded,
// or whose diagnostic says retrying cannot help.
type notRetryable struct{ msg string }

func (e notRetryable) Error() string { return e.msg }

func refuseRetry(format string, args ...any) error { return notRetryable{fmt.Sprintf(format, args...)} }

// queueRetry queues a new run of a finished run's workflow, with retry_of
// set to it and the attempt counted up.
func (a *app) queueRetry(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	old, err := a.runs.GetRun(ctx, id)
	if err != nil {
		return old, err
	}
	switch {
	case !old.Status.Terminal():
		return old, refuseRetry("run %s is %s: only a finished run can be retried", id, old.Status)
	case old.Status == runstate.StatusSuccess:
		return old, refuseRetry("run %s succeeded: there is nothing to retry", id)
	case old.Diagnostic != nil && !old.Diagnostic.Retryable:
		return old, refuseRetry("run %s failed with %s, which its diagnostic marks not retryable", id, old.Diagnostic.ErrorCode)
	}
	path := old.Labels[labelWorkflowFile]
	wf, err := workflow.Load(path)
	if err != nil {
		return old, exitError{Code: exitFailure, Msg: fmt.Sprintf("the workflow of run %s: %v", id, err)}
	}
	labels := map[string]string{}
	for k, v := range old.Labels {
		if k != tracker.LabelSignal {
			labels[k] = v
		}
	}
	run, err := a.createRun(ctx, path, wf, old.Priority, labels, old.RunID)
	if err != nil {
		return run, err
	}
	a.log.Info("retry created", "run_id", run.RunID, "retry_of", old.RunID, "attempt", run.Attempt)
	return run, nil
}
