package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate/internal/redact"
	"github.com/runstate/runstate/stores"
)

// A PostgreSQL store opens by the name "postgres:DSN", "postgresql:DSN" or
// a bare postgres://… URL (stores.Open), with the settings schema,
// max_open_conns, scratch_schema=true (the store creates the schema, which
// must not exist, and drops it when it closes), notify_runnable=true and
// notify_runs=true (docs/postgres.md).
func init() {
	stores.Register(stores.Scheme{
		Name: "postgres", Aliases: []string{"postgresql"},
		Arg: "DSN", ArgMeans: "a DSN", Example: "postgres:postgres://user@host:5432/database",
		Settings: []string{"schema", "max_open_conns", "scratch_schema", "notify_runnable", "notify_runs"},
		Check: func(name stores.Name) error {
			if _, err := pgx.ParseConfig(dsnOf(name)); err != nil {
				// Not shown: a DSN that does not parse may hide a password anywhere.
				return errors.New("the DSN does not parse; want postgres:postgres://user@host:5432/database or postgres:'host=… dbname=…' (values with spaces in single quotes)")
			}
			return nil
		},
		Redact: func(name stores.Name) string {
			if strings.HasPrefix(name.Arg, "//") {
				return redact.URL(name.String())
			}
			return name.Scheme + ":" + redact.PostgresDSN(name.Arg)
		},
		Open: openNamed,
	})
}

// dsnOf is the DSN of a store name: what follows postgres:, or the whole
// name when it is a postgres://… URL.
func dsnOf(name stores.Name) string {
	if strings.HasPrefix(name.Arg, "//") {
		return name.String()
	}
	return name.Arg
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	o := Options{DSN: dsnOf(name), Schema: opts.Settings["schema"], Logger: opts.Logger, Clock: opts.Clock}
	var err error
	if o.MaxOpenConns, err = opts.PositiveSetting("max_open_conns", opts.MaxOpenConns); err != nil {
		return nil, err
	}
	if o.ScratchSchema, err = opts.BoolSetting("scratch_schema", false); err != nil {
		return nil, err
	}
	if o.NotifyRunnable, err = opts.BoolSetting("notify_runnable", opts.NotifyRunnable); err != nil {
		return nil, err
	}
	if o.NotifyRuns, err = opts.BoolSetting("notify_runs", opts.NotifyRuns); err != nil {
		return nil, err
	}
	s, err := Open(ctx, o)
	if err != nil {
		return nil, err
	}
	where := "?"
	if cfg, err := pgx.ParseConfig(o.DSN); err == nil {
		where = fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	}
	opts.Log().Info("using store", "store", "postgres", "database", where)
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}
