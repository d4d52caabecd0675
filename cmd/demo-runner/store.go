package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/cmd/demo-runner/internal/badgershare"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/redact"
	"github.com/runstate/runstate/plugin"
)

// openedStore is the store a command works on. leased is the same store
// with its leases, nil exactly when it has none: no wrapper stands between
// a store and its leases.
type openedStore struct {
	store  runstate.RunStateStore
	leased runstate.Store
	close  func() error
}

func storeWithLeases(s runstate.Store, close func() error) *openedStore {
	return &openedStore{store: s, leased: s, close: close}
}

// openStore opens the store named by --store: memory, badger:PATH,
// mysql:DSN, postgres:DSN, plugin:PATH (configured by --plugin-config) or gateway:ADDR
// (configured by the --gateway-* flags). It logs which
// store is in use and warns when it keeps nothing after the process ends.
// hold says the command runs for long: on Badger it then holds the
// directory when it can and shares it with the machine's other processes.
func openStore(ctx context.Context, g globals, log *slog.Logger, hold bool) (*openedStore, error) {
	name, pluginConfig := g.store, g.pluginConfig
	kind, arg, _ := strings.Cut(name, ":")
	switch kind {
	case "memory":
		log.Warn("using the memory store: it is not persistent, runs are lost when this process exits", "store", "memory")
		s, err := memory.Open(ctx, memory.Options{})
		if err != nil {
			return nil, err
		}
		return storeWithLeases(s, s.Close), nil
	case "badger":
		if err := os.MkdirAll(arg, 0o755); err != nil {
			return nil, err
		}
		s, err := badgershare.Open(ctx, badgershare.Options{Dir: arg, Serve: hold, Logger: log})
		if err != nil {
			return nil, err
		}
		how := "through the process that holds it"
		if s.Held() {
			how = "holding the directory"
		}
		log.Info("using store", "store", "badger", "dir", arg, "access", how, "socket", s.Socket())
		return storeWithLeases(s, s.Close), nil
	case "mysql":
		// A demo-runner process executes one run at a time: a few
		// connections serve it, and a fleet of them fits the server's
		// max_connections (docs/mysql.md).
		s, err := mysql.Open(ctx, mysql.Options{DSN: arg, Logger: log, MaxOpenConns: 4})
		if err != nil {
			return nil, err
		}
		where := "?"
		if cfg, err := gomysql.ParseDSN(arg); err == nil {
			where = fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
		}
		log.Info("using store", "store", "mysql", "database", where)
		return storeWithLeases(s, s.Close), nil
	case "postgres", "postgresql":
		dsn := postgresDSN(name)
		// As for MySQL: one run at a time per process, a few connections.
		// Submissions and releases wake idle workers (LISTEN/NOTIFY).
		s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Logger: log, MaxOpenConns: 4, NotifyRunnable: true})
		if err != nil {
			return nil, err
		}
		where := "?"
		if cfg, err := pgx.ParseConfig(dsn); err == nil {
			where = fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
		}
		log.Info("using store", "store", "postgres", "database", where)
		return storeWithLeases(s, s.Close), nil
	case "plugin":
		// A plugin that dies is started again, so that a worker outlives it.
		c, err := plugin.Open(ctx, arg, plugin.Options{Config: pluginConfig, Logger: log, Relaunch: true})
		if err != nil {
			return nil, err
		}
		log.Info("using store", "store", "plugin", "path", arg, "plugin", c.Name(), "version", c.Version(),
			"config", plugin.Redacted(pluginConfig, nil))
		if c.Name() == "memory" {
			log.Warn("the plugin keeps runs in memory: they are lost when the plugin exits")
		}
		if full, ok := c.Store().(runstate.Store); ok {
			return storeWithLeases(full, c.Close), nil
		}
		return &openedStore{store: c.Store(), close: c.Close}, nil
	case "gateway":
		return g.gateway.open(ctx, arg, log)
	}
	return nil, checkStoreName(name) // check refused it already
}

// checkStoreName refuses a store name that cannot be opened, before
// anything is: its message shows the name without a password.
func checkStoreName(name string) error {
	const want = "want memory, badger:PATH, mysql:DSN, postgres:DSN, plugin:PATH or gateway:HOST:PORT"
	kind, arg, _ := strings.Cut(name, ":")
	switch {
	case kind == "memory" && arg != "":
		return usageError("--store %q: memory takes nothing after it; %s", redact.Store(name), want)
	case kind == "memory":
	case kind == "badger" && arg == "":
		return usageError("--store badger:PATH needs a directory, e.g. badger:.runstate/store")
	case kind == "plugin" && arg == "":
		return usageError("--store plugin:PATH needs the plugin binary, e.g. plugin:./runstate-plugin-badger")
	case kind == "gateway" && arg == "":
		return usageError("--store gateway:HOST:PORT needs the gateway's address, e.g. gateway:runs.example.com:7443")
	case kind == "mysql":
		if _, err := gomysql.ParseDSN(arg); err != nil {
			return usageError("--store mysql:DSN: %v; want mysql:user:password@tcp(host:3306)/database", err)
		}
	case kind == "postgres", kind == "postgresql":
		if _, err := pgx.ParseConfig(postgresDSN(name)); err != nil {
			// Not shown: a DSN that does not parse may hide a password anywhere.
			return usageError("--store %s:…: the DSN does not parse; want postgres:postgres://user@host:5432/database or postgres:'host=… dbname=…' (values with spaces in single quotes)", kind)
		}
	case kind == "badger", kind == "plugin", kind == "gateway":
	default:
		return usageError("--store %q: %s", redact.Store(name), want)
	}
	return nil
}

// postgresDSN is the DSN of a postgres store name: postgres:DSN, or a
// bare postgres://… URL.
func postgresDSN(name string) string {
	kind, arg, _ := strings.Cut(name, ":")
	if strings.HasPrefix(arg, "//") {
		return name
	}
	if kind == "postgresql" || kind == "postgres" {
		return arg
	}
	return name
}

// storeIdentity names the store --store points at, the same way from any
// working directory: worker ids are unique per store.
func storeIdentity(name string) string {
	kind, arg, _ := strings.Cut(name, ":")
	if kind == "badger" {
		if dir, err := badgershare.Resolve(arg); err == nil {
			return kind + ":" + dir
		}
	}
	return name
}

// gatewayFlags configure a gateway:ADDR store.
type gatewayFlags struct {
	ca, cert, key, tokenFile string
	plaintext                bool
}

// open connects to the gateway at addr. Its token comes from the token
// file or the environment, never from the command line. The worker id
// must be the token's principal name for claims (docs/gateway.md).
func (f gatewayFlags) open(ctx context.Context, addr string, log *slog.Logger) (*openedStore, error) {
	opts := gateway.Options{TokenFile: f.tokenFile, Plaintext: f.plaintext}
	if !f.plaintext {
		cfg, err := gateway.ClientTLS(f.ca, f.cert, f.key)
		if err != nil {
			return nil, err
		}
		opts.TLS = cfg
	}
	c, err := gateway.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	log.Info("using store", "store", "gateway", "addr", addr, "tls", !f.plaintext)
	if full, ok := c.Store().(runstate.Store); ok {
		return storeWithLeases(full, c.Close), nil
	}
	return &openedStore{store: c.Store(), close: c.Close}, nil
}
