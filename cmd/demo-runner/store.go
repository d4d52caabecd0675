package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/spec"
)

// openedStore is the store a command works on.
type openedStore struct {
	spec.RunStateStore
	close func() error
}

// openStore opens the store named by --store: memory, badger:PATH,
// mysql:DSN or plugin:PATH (configured by --plugin-config). It logs which
// store is in use and warns when it keeps nothing after the process ends.
func openStore(ctx context.Context, name string, pluginConfig map[string]string, log *slog.Logger) (*openedStore, error) {
	kind, arg, _ := strings.Cut(name, ":")
	switch kind {
	case "memory":
		log.Warn("using the memory store: it is not persistent, runs are lost when this process exits", "store", "memory")
		s := memory.New()
		return &openedStore{s, s.Close}, nil
	case "badger":
		if arg == "" {
			return nil, usageError("--store badger:PATH needs a directory")
		}
		if err := os.MkdirAll(arg, 0o755); err != nil {
			return nil, err
		}
		s, err := badger.Open(ctx, badger.Options{Dir: arg, Logger: log})
		if err != nil {
			return nil, err
		}
		log.Info("using store", "store", "badger", "dir", arg)
		return &openedStore{s, s.Close}, nil
	case "mysql":
		s, err := mysql.Open(ctx, mysql.Options{DSN: arg, Logger: log})
		if err != nil {
			return nil, err
		}
		where := "?"
		if cfg, err := gomysql.ParseDSN(arg); err == nil {
			where = fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
		}
		log.Info("using store", "store", "mysql", "database", where)
		return &openedStore{s, s.Close}, nil
	case "plugin":
		if arg == "" {
			return nil, usageError("--store plugin:PATH needs the plugin binary")
		}
		c, err := plugin.Open(ctx, arg, plugin.Options{Config: pluginConfig, Logger: log})
		if err != nil {
			return nil, err
		}
		log.Info("using store", "store", "plugin", "path", arg, "plugin", c.Name(), "version", c.Version(),
			"config", plugin.Redacted(pluginConfig, nil))
		if c.Name() == "memory" {
			log.Warn("the plugin keeps runs in memory: they are lost when the plugin exits")
		}
		return &openedStore{c.Store(), c.Close}, nil
	}
	return nil, usageError("--store %q: want memory, badger:PATH, mysql:DSN or plugin:PATH", name)
}
