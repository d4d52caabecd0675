package main

import (
	"context"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// serve: the HTTP API, /metrics and /healthz (serve.go serves them).
func (c commands) serve() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP JSON API, Prometheus /metrics and /healthz",
		Long: `Serve answers the HTTP API (docs/demo-runner.md; its OpenAPI description at
/openapi.json), Prometheus metrics at /metrics and a health check at /healthz.`,
		Example: `  demo-runner serve --addr 127.0.0.1:8080`,
		Args:    cli.ExactArgs(),
		RunE: c.withApp(holds, func(ctx context.Context, a *app, args []string) error {
			return a.serve(ctx, o.addr)
		}),
	}
	cmd.Flags().StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	return cmd
}
