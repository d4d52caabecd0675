package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// labelWorkflowFile names the workflow file a queued run executes; workers
// read it from there (the file must be where every worker can read it).
const labelWorkflowFile = "runstate/workflow-file"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &globals{pluginConfig: kvFlag{}}
	return cli.Execute(ctx, newRoot(g, &options{}), args, stdout, stderr, exitUsage)
}

// newRoot builds the demo-runner command tree; g and o receive the flags.
// Each subcommand is built in its own file.
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
	c := commands{g: g, o: o}
	byName := map[string]*cobra.Command{}
	for _, cmd := range []*cobra.Command{c.run(), c.submit(), c.worker(), c.status(), c.list(), c.audit(),
		c.cancel(), c.signal(), c.retry(), c.recover(), c.serve(), c.deadletters(), cli.VersionCommand(root.Name())} {
		byName[cmd.Name()] = cmd
		root.AddCommand(cmd)
	}
	completeFlags(root, byName)
	return root
}

// commands builds the subcommands: each one's flags land in o, and the
// global flags in g.
type commands struct {
	g *globals
	o *options
}

// withApp runs fn once the global flags are checked and the store is
// open as the command's role needs it.
func (c commands) withApp(r func() role, fn func(ctx context.Context, a *app, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := c.g.check(); err != nil {
			return err
		}
		a, err := start(cmd.Context(), *c.g, r(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		defer a.close()
		return fn(cmd.Context(), a, args)
	}
}

// Roles of the commands.
var (
	queries  = func() role { return role{opensStore: true} }
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
	serve        serveOptions
	metricsAddr  string
	poll, grace  time.Duration
	recoverEvery time.Duration
	slots        int
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
	case o.slots < 1 || o.slots > runstate.MaxBatchItems:
		return usageError("--slots %d: want how many runs the worker executes at once, 1 to %d", o.slots, runstate.MaxBatchItems)
	}
	for _, s := range strings.Split(o.statuses, ",") {
		if !slices.Contains([]runstate.RunStatus{runstate.StatusQueued, runstate.StatusWaiting, runstate.StatusRunning}, runstate.RunStatus(s)) {
			return usageError("--statuses %q: %q is not claimable; want queued, waiting or running, comma-separated", o.statuses, s)
		}
	}
	return nil
}

// printMove prints the run an operator's command moved, as RUN_ID STATUS.
func (a *app) printMove(run runstate.RunSnapshot, err error) error {
	if err != nil {
		return storeError(err)
	}
	a.metrics.observeFinished(run)
	fmt.Fprintf(a.stdout, "%s %s\n", run.RunID, run.Status)
	return nil
}
