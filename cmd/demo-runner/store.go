package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/badgershare"
	"github.com/runstate/runstate/stores"
	_ "github.com/runstate/runstate/stores/all" // every store kind --store names
)

// openStore opens the store --store names (stores.Open): a plugin
// is configured by --plugin-config, a gateway by the --gateway-* flags.
// hold says the command runs for long: on Badger it then holds the
// directory when it can and shares it with the machine's other processes.
func openStore(ctx context.Context, g globals, log *slog.Logger, hold bool) (*stores.Opened, error) {
	return stores.Open(ctx, g.storeName, stores.Options{
		Logger: log,
		// A demo-runner process executes one run at a time: a few
		// connections serve it, and a fleet of them fits a SQL server's
		// max_connections (docs/mysql.md). On PostgreSQL submissions and
		// releases wake idle workers (LISTEN/NOTIFY).
		MaxOpenConns:   4,
		NotifyRunnable: true, NotifyRuns: true,
		Hold: hold,
		// A plugin that dies is started again, so that a worker outlives it.
		Plugin: stores.PluginOptions{Config: g.pluginConfig, Relaunch: true},
		// A gateway's token comes from its file or the environment, never
		// from the command line; the worker id must be the token's
		// principal name for claims (docs/gateway.md).
		Gateway:  g.gateway,
		Override: map[string]stores.OpenFunc{"badger": openSharedBadger},
	})
}

// openSharedBadger opens a Badger directory that the machine's demo-runner
// processes share: the one that holds it serves the others over a socket.
func openSharedBadger(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	dir, log := name.Arg, opts.Log()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s, err := badgershare.Open(ctx, badgershare.Options{Dir: dir, Serve: opts.Hold, Logger: log})
	if err != nil {
		return nil, err
	}
	how := "through the process that holds it"
	if s.Held() {
		how = "holding the directory"
	}
	log.Info("using store", "store", "badger", "dir", dir, "access", how, "socket", s.Socket())
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}

// checkStoreName refuses a store name that cannot be opened, before
// anything is: its message shows the name without a password.
func checkStoreName(name string) error {
	if err := stores.Check(name); err != nil {
		return usageError("--store %s", runstate.MessageOf(err))
	}
	return nil
}

// storeIdentity names the store --store points at, the same way from any
// working directory: worker ids are unique per store.
func storeIdentity(name string) string {
	n := stores.Parse(name)
	if n.Scheme == "badger" {
		if dir, err := badgershare.Resolve(n.Arg); err == nil {
			return n.Scheme + ":" + dir
		}
	}
	return name
}
