package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/internal/faultcheck"
)

// Between the store and PostgreSQL, a proxy partitions and cuts the path.
func TestFaultsOnThePathToTheServer(t *testing.T) {
	srv, schema := freshSchema(t)
	cfg, err := pgx.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	host, port, _ := strings.Cut(p.Addr(), ":")
	dsn := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable", host, port, cfg.User, cfg.Database)
	if cfg.Password != "" {
		dsn += " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(cfg.Password) + "'"
	}
	faultcheck.Run(t, open(t, postgres.Options{DSN: dsn, Schema: schema}), p)
}
