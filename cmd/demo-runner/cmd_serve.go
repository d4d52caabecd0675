package main

import (
	"context"
	"time"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// serve: the console, the HTTP API, /metrics and /healthz (serve.go serves them).
func (c commands) serve() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the web console, the HTTP JSON API, Prometheus /metrics and /healthz",
		Long: `Serve answers the web console at /ui/, the HTTP API (docs/demo-runner.md; its OpenAPI
description at /openapi.json), Prometheus metrics at /metrics and a health check at /healthz.

On a loopback address it may run without credentials. On any other address it requires TLS
(--tls-cert, --tls-key) and a tokens file (--tokens-file, the gateway's format): a reader's
token sees, an operator's token also cancels, signals and retries.`,
		Example: `  demo-runner serve --addr 127.0.0.1:8080
  demo-runner serve --addr :8443 --tls-cert cert.pem --tls-key key.pem --tokens-file tokens.yaml`,
		Args: cli.ExactArgs(),
		RunE: c.withApp(holds, func(ctx context.Context, a *app, args []string) error {
			if err := o.serve.check(); err != nil {
				return err
			}
			return a.serve(ctx, o.serve)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.serve.addr, "addr", "127.0.0.1:8080", "address to listen on")
	f.StringVar(&o.serve.tlsCert, "tls-cert", "", "certificate (PEM) to serve HTTPS with; required off loopback")
	f.StringVar(&o.serve.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	f.StringVar(&o.serve.tokensFile, "tokens-file", "", "principals and their token hashes (the gateway's tokens file); required off loopback")
	f.DurationVar(&o.serve.liveEvery, "live-every", time.Second, "how often the console's live streams read the store")
	f.BoolVar(&o.serve.livePollOnly, "live-poll-only", false, "the console's live streams poll every --live-every alone, without the store's change streams")
	return cmd
}
