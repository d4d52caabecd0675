package main

import (
	"context"
	"strings"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// list: print a page of runs.
func (c commands) list() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first (JSON)",
		Long: `List prints a page of runs, newest first, as {"runs": [...], "next_cursor": "..."}; pass
next_cursor to --cursor for the next page. Filters combine.`,
		Example: `  demo-runner list --status running,waiting --label team=web --limit 20
  demo-runner list --workflow approval --cursor NEXT_CURSOR`,
		Args: cli.ExactArgs(),
		RunE: c.withApp(queries, func(ctx context.Context, a *app, args []string) error {
			page, err := a.runs.ListRuns(ctx, o.list.params())
			if err != nil {
				return storeError(err)
			}
			return a.printJSON(newRunList(page))
		}),
	}
	l := cmd.Flags()
	o.list.labels = kvFlag{}
	l.StringVar(&o.list.statuses, "status", "", "statuses, comma-separated")
	l.StringVar(&o.list.workflow, "workflow", "", "workflow name")
	l.Var(o.list.labels, "label", "label key=value (repeatable)")
	l.IntVar(&o.list.limit, "limit", 20, "page size")
	l.StringVar(&o.list.cursor, "cursor", "", "next_cursor of the previous page")
	return cmd
}

// listOptions are the list command's filters, also sent through the API.
type listOptions struct {
	statuses, workflow, cursor string
	labels                     kvFlag
	limit                      int
}

func (l listOptions) params() runstate.ListRunsParams {
	p := runstate.ListRunsParams{WorkflowName: l.workflow, Labels: l.labels, Limit: l.limit, Cursor: l.cursor}
	if l.statuses != "" {
		p.Statuses = strings.Split(l.statuses, ",")
	}
	return p
}
