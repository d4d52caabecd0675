package mysql

import (
	"context"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate/internal/redact"
	"github.com/runstate/runstate/stores"
)

// A MySQL store opens by the name "mysql:DSN" (stores.Open), with
// the settings max_open_conns, scratch_database=true (the store creates
// the DSN's database, which must not exist, and drops it when it closes)
// and create_database=true (the store creates the DSN's database when it
// does not exist, and keeps it).
func init() {
	stores.Register(stores.Scheme{
		Name: "mysql", Arg: "DSN", ArgMeans: "a DSN", Example: "mysql:user:password@tcp(host:3306)/database",
		Settings: []string{"max_open_conns", "scratch_database", "create_database"},
		Check: func(name stores.Name) error {
			if _, err := gomysql.ParseDSN(name.Arg); err != nil {
				return fmt.Errorf("%v; want mysql:user:password@tcp(host:3306)/database", err)
			}
			return nil
		},
		Redact: func(name stores.Name) string { return name.Scheme + ":" + redact.DSN(name.Arg) },
		Open:   openNamed,
	})
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	maxConns, err := opts.PositiveSetting("max_open_conns", opts.MaxOpenConns)
	if err != nil {
		return nil, err
	}
	scratch, err := opts.BoolSetting("scratch_database", false)
	if err != nil {
		return nil, err
	}
	create, err := opts.BoolSetting("create_database", false)
	if err != nil {
		return nil, err
	}
	s, err := Open(ctx, Options{DSN: name.Arg, Logger: opts.Logger, MaxOpenConns: maxConns, ScratchDatabase: scratch, CreateDatabase: create, Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	where := "?"
	if cfg, err := gomysql.ParseDSN(name.Arg); err == nil {
		where = fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
	}
	opts.Log().Info("using store", "store", "mysql", "database", where)
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}
