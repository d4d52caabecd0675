package main

import (
	"context"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// cancel: end a run as canceled.
func (c commands) cancel() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a run",
		Long: `Cancel ends a run that has not finished as canceled, with --reason in its audit trail. The
worker executing it notices within its --renew and stops the step's commands.`,
		Example: `  demo-runner cancel 01JD3Y8M4V6K0W7A2B9C5E1F3G --reason "wrong branch"`,
		Args:    cli.ExactArgs("RUN_ID"),
		RunE: c.withApp(queries, func(ctx context.Context, a *app, args []string) error {
			return a.printMove(a.operator.Cancel(ctx, args[0], o.reason))
		}),
	}
	cmd.Flags().StringVar(&o.reason, "reason", "canceled by an operator", "why, for the audit trail")
	return cmd
}
