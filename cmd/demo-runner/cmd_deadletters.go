package main

import (
	"context"

	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/tracker"
	"github.com/spf13/cobra"
)

// deadletters: list the webhook notifications that were not delivered.
func (c commands) deadletters() *cobra.Command {
	return &cobra.Command{
		Use:     "deadletters",
		Short:   "List webhook notifications that could not be delivered (JSON)",
		Example: `  demo-runner deadletters --data-dir .runstate`,
		Args:    cli.ExactArgs(),
		RunE: c.withApp(func() role { return role{} }, func(ctx context.Context, a *app, args []string) error {
			list, err := a.dead.List()
			if err != nil {
				return exitError{Code: exitFailure, Msg: err.Error()}
			}
			if list == nil {
				list = []tracker.DeadLetter{}
			}
			return a.printJSON(list)
		}),
	}
}
