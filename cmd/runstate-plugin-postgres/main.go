// Command runstate-plugin-postgres serves a PostgreSQL store as a plugin.
// Configuration: dsn (required, secret; the password may come from
// PGPASSWORD or ~/.pgpass instead), schema, max_open_conns, and
// scratch_schema=true: the plugin creates the schema, which must not
// exist, and drops it when it stops (for a schema per conformance check:
// schema=runs_{{unique}}); notify_runnable=true announces runnable runs to
// the workers that watch the schema directly (docs/postgres.md).
package main

import (
	"context"
	"strconv"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"dsn"}, []string{"schema", "max_open_conns", "scratch_schema", "notify_runnable"}); err != nil {
			return nil, err
		}
		opts := postgres.Options{DSN: cfg["dsn"], Schema: cfg["schema"]}
		if v := cfg["max_open_conns"]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, runstate.InvalidArgument("max_open_conns", "%q is not a positive number", v)
			}
			opts.MaxOpenConns = n
		}
		switch v := cfg["scratch_schema"]; v {
		case "", "false":
		case "true":
			opts.ScratchSchema = true
		default:
			return nil, runstate.InvalidArgument("scratch_schema", "%q: want true or false", v)
		}
		switch v := cfg["notify_runnable"]; v {
		case "", "false":
		case "true":
			opts.NotifyRunnable = true
		default:
			return nil, runstate.InvalidArgument("notify_runnable", "%q: want true or false", v)
		}
		return postgres.Open(ctx, opts)
	}, plugin.WithName("postgres", "postgres"))
}
