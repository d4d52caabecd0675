package main

import (
	"context"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// audit: print a run's audit trail.
func (c commands) audit() *cobra.Command {
	return &cobra.Command{
		Use:     "audit RUN_ID",
		Short:   "Print a run's audit trail (JSON)",
		Example: `  demo-runner audit 01JD3Y8M4V6K0W7A2B9C5E1F3G`,
		Args:    cli.ExactArgs("RUN_ID"),
		RunE: c.withApp(queries, func(ctx context.Context, a *app, args []string) error {
			return a.printResult(a.auditTrail(ctx, args[0]))
		}),
	}
}

// auditTrail reads a run's whole audit trail.
func (a *app) auditTrail(ctx context.Context, id string) ([]runstate.AuditEvent, error) {
	return a.auditTrailAfter(ctx, id, 0)
}

// auditTrailAfter reads a run's audit events after seq after.
func (a *app) auditTrailAfter(ctx context.Context, id string, after int64) ([]runstate.AuditEvent, error) {
	all := []runstate.AuditEvent{}
	for {
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
