package main

import (
	"context"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// recover: run crash recovery now.
func (c commands) recover() *cobra.Command {
	return &cobra.Command{
		Use:   "recover",
		Short: "Run crash recovery now and print its report (JSON)",
		Long: `Recover settles the runs that processes which died left behind, under --recovery, and
prints what it did. Runs that live workers hold are never touched.`,
		Example: `  demo-runner recover --recovery fail`,
		Args:    cli.ExactArgs(),
		RunE: c.withApp(func() role { return role{opensStore: true, recover: true} }, func(ctx context.Context, a *app, args []string) error {
			return a.printJSON(a.recovery) // start recovered
		}),
	}
}
