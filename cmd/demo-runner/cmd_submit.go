package main

import (
	"context"
	"fmt"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// submit: queue a run for a worker.
func (c commands) submit() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Queue a run of a workflow for a worker",
		Long: `Submit queues a run of the workflow FILE and prints its run id. A worker claims it by
priority (larger first), then by age. The file must be readable at the same absolute path
by the workers.`,
		Example: `  demo-runner submit examples/workflows/approval.yaml
  demo-runner submit examples/workflows/hello.yaml --priority 10 --label team=web`,
		Args: cli.ExactArgs("FILE"),
		RunE: c.withApp(queries, func(ctx context.Context, a *app, args []string) error {
			run, err := a.createFromFile(ctx, args, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, run.RunID)
			return nil
		}),
	}
	addRunFlags(cmd, o)
	return cmd
}
