// Command runstate-plugin-mysql serves a MySQL store as a plugin.
// Configuration: dsn (required, secret), max_open_conns, and
// scratch_database=true: the plugin creates the DSN's database, which must
// not exist, and drops it when it stops (for a database per conformance
// check: dsn=…/runs_{{unique}}).
package main

import (
	"context"
	"strconv"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"dsn"}, []string{"max_open_conns", "scratch_database"}); err != nil {
			return nil, err
		}
		opts := mysql.Options{DSN: cfg["dsn"]}
		if v := cfg["max_open_conns"]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, runstate.InvalidArgument("max_open_conns", "%q is not a positive number", v)
			}
			opts.MaxOpenConns = n
		}
		switch v := cfg["scratch_database"]; v {
		case "", "false":
		case "true":
			opts.ScratchDatabase = true
		default:
			return nil, runstate.InvalidArgument("scratch_database", "%q: want true or false", v)
		}
		return mysql.Open(ctx, opts)
	}, plugin.WithName("mysql", "mysql/innodb"))
}
