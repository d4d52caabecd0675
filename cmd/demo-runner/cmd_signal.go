package main

import (
	"context"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// signal: resume a waiting run.
func (c commands) signal() *cobra.Command {
	return &cobra.Command{
		Use:   "signal RUN_ID",
		Short: "Resume a run waiting in a wait step",
		Long: `Signal resumes a run waiting in a wait step: the worker holding it goes on at once, or
the next worker to claim it.`,
		Example: `  demo-runner signal 01JD3Y8M4V6K0W7A2B9C5E1F3G`,
		Args:    cli.ExactArgs("RUN_ID"),
		RunE: c.withApp(queries, func(ctx context.Context, a *app, args []string) error {
			run, err := a.operator.Signal(ctx, args[0])
			if err == nil {
				a.log.Info("run signalled: the worker holding it resumes it (or the next worker to claim it)", "run_id", args[0])
			}
			return a.printMove(run, err)
		}),
	}
}
