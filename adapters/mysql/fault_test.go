package mysql_test

import (
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/internal/faultcheck"
)

// Between the store and MariaDB, a proxy partitions and cuts the path.
func TestFaultsOnThePathToTheServer(t *testing.T) {
	srv, db := freshDB(t)
	cfg, err := gomysql.ParseDSN(srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg.Addr = p.Addr()
	faultcheck.Run(t, open(t, cfg.FormatDSN()), p)
}
