package main

import (
	"context"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// status: print a run's snapshot.
func (c commands) status() *cobra.Command {
	return &cobra.Command{
		Use:     "status RUN_ID",
		Short:   "Print a run's snapshot, with steps and hosts (JSON)",
		Example: `  demo-runner status 01JD3Y8M4V6K0W7A2B9C5E1F3G`,
		Args:    cli.ExactArgs("RUN_ID"),
		RunE: c.withApp(queries, func(ctx context.Context, a *app, args []string) error {
			return a.printResult(a.runs.GetRun(ctx, args[0]))
		}),
	}
}
