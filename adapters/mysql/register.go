package mysql

import (
	"context"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/redact"
)

// A MySQL store opens by the name "mysql:DSN" (runstate.OpenStore), with
// the settings max_open_conns and scratch_database=true (the store creates
// the DSN's database, which must not exist, and drops it when it closes).
func init() {
	runstate.RegisterScheme(runstate.StoreScheme{
		Name: "mysql", Arg: "DSN", ArgMeans: "a DSN", Example: "mysql:user:password@tcp(host:3306)/database",
		Settings: []string{"max_open_conns", "scratch_database"},
		Check: func(name runstate.StoreName) error {
			if _, err := gomysql.ParseDSN(name.Arg); err != nil {
				return fmt.Errorf("%v; want mysql:user:password@tcp(host:3306)/database", err)
			}
			return nil
		},
		Redact: func(name runstate.StoreName) string { return name.Scheme + ":" + redact.DSN(name.Arg) },
		Open:   openNamed,
	})
}

func openNamed(ctx context.Context, name runstate.StoreName, opts runstate.OpenOptions) (*runstate.OpenedStore, error) {
	maxConns, err := opts.PositiveSetting("max_open_conns", opts.MaxOpenConns)
	if err != nil {
		return nil, err
	}
	scratch, err := opts.BoolSetting("scratch_database", false)
	if err != nil {
		return nil, err
	}
	s, err := Open(ctx, Options{DSN: name.Arg, Logger: opts.Logger, MaxOpenConns: maxConns, ScratchDatabase: scratch})
	if err != nil {
		return nil, err
	}
	where := "?"
	if cfg, err := gomysql.ParseDSN(name.Arg); err == nil {
		where = fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
	}
	opts.Log().Info("using store", "store", "mysql", "database", where)
	return &runstate.OpenedStore{Runs: s, Close: s.Close}, nil
}
