// Package mysqltest is the conformance harness of the MySQL adapter: each
// check gets a database of its own on a server sqltest.MySQL finds.
package mysqltest

import (
	"context"
	"log/slog"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqltarget"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
)

// Target is the MySQL adapter's conformance target (sqltarget.Target):
// each check gets a database of its own on s, and every handle a pool of
// its own. With manualClock the suite moves the stores' clock
// (Options.Clock); without, the server's clock decides. A server reached
// over plain TCP has the faults of a proxy (FAULT-*); one behind a socket
// or name-checked TLS is reached directly, without faults.
func Target(s *scratch.Server, manualClock bool) conformance.Target {
	return sqltarget.Target(engine(s), manualClock, nil)
}

// TargetRestarting is Target on a MySQL server of the test's own
// (sqltest.MySQL.StartPrivate), which r kills and starts again (FAULT-002).
func TargetRestarting(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	return sqltarget.Target(engine(s), manualClock, r)
}

func engine(s *scratch.Server) sqltarget.Engine {
	return sqltarget.Engine{Name: "mysql", Source: s.Source, ProxyAddr: s.ProxyAddr,
		NewCheck: func(ctx context.Context) (sqltarget.Check, error) {
			name, err := s.CreateDatabase(ctx)
			return database{s, name}, err
		}}
}

// database is a check's database.
type database struct {
	server *scratch.Server
	name   string
}

func (d database) DSN(via string) (string, error) {
	if via == "" {
		return d.server.DSN(d.name), nil
	}
	return d.server.DSNVia(d.name, via), nil
}

func (d database) Open(ctx context.Context, dsn string, clock runstate.Clock, _ bool) (sqltarget.Store, error) {
	return mysql.Open(ctx, mysql.Options{DSN: dsn, MaxOpenConns: 16, Logger: slog.New(slog.DiscardHandler), Clock: clock})
}

// Drop drops the database; the handles' errors on closing are not the check's.
func (d database) Drop(ctx context.Context, _ error) error { return d.server.DropDatabase(ctx, d.name) }
