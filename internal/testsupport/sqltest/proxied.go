package sqltest

import (
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresBehindProxy splits the DSN of a PostgreSQL test server into the
// server's host:port and a URL DSN with placeholder where the address
// goes, for a plugin that reaches the server through a fault proxy.
func PostgresBehindProxy(t testing.TB, dsn, placeholder string) (backend, template string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.User
	if cfg.Password != "" {
		user += ":" + cfg.Password
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), "postgres://" + user + "@" + placeholder + "/" + cfg.Database + "?sslmode=disable"
}
