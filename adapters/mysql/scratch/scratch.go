// Package scratch makes databases on a MySQL server, one per conformance
// check or test, and drops them. It does not depend on the adapter, so the
// adapter's own tests can use it, and it links nothing of Docker, so the
// conformance runner can.
package scratch

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// Server is a MySQL server to make scratch databases on.
type Server struct {
	cfg *gomysql.Config
	// Source says where the server came from (environment, local, docker).
	Source string
}

// FromDSN returns the server a DSN points at (its database name is
// ignored), after checking that it answers. source says where the DSN came
// from, for reports.
func FromDSN(dsn, source string) (*Server, error) {
	s, err := FromDSNUnchecked(dsn, source)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s, s.Ping(ctx)
}

// FromDSNUnchecked is FromDSN for a server that may not be up yet.
func FromDSNUnchecked(dsn, source string) (*Server, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, Source: source}, nil
}

// Ping checks that the server answers.
func (s *Server) Ping(ctx context.Context) error {
	cfg := s.cfg.Clone()
	cfg.DBName = ""
	cfg.Timeout = 3 * time.Second
	cfg.Logger = &gomysql.NopLogger{} // a server starting up is expected not to answer
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	return db.PingContext(ctx)
}

// ProxyAddr returns the server's TCP address for a proxy to forward to,
// or why there is none: a server reached through a socket, or over TLS
// that verifies the server's name, which a proxy's address would not match.
func (s *Server) ProxyAddr() (string, error) {
	switch {
	case s.cfg.Net != "tcp":
		return "", fmt.Errorf("the server is reached over %s, not TCP", s.cfg.Net)
	case s.cfg.TLSConfig != "" && s.cfg.TLSConfig != "false" && s.cfg.TLSConfig != "skip-verify" && s.cfg.TLSConfig != "preferred":
		return "", fmt.Errorf("the server is reached over TLS that verifies its name (tls=%s)", s.cfg.TLSConfig)
	}
	return s.cfg.Addr, nil
}

// DSNVia returns the DSN of database db through addr (host:port) in place
// of the server's address.
func (s *Server) DSNVia(db, addr string) string {
	cfg := s.cfg.Clone()
	cfg.DBName, cfg.Addr = db, addr
	return cfg.FormatDSN()
}

// DSN returns the server's DSN for database db.
func (s *Server) DSN(db string) string {
	cfg := s.cfg.Clone()
	cfg.DBName = db
	return cfg.FormatDSN()
}

// CreateDatabase makes a fresh, uniquely named database and returns its name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	b := make([]byte, 6)
	rand.Read(b)
	name := "runstate_t_" + hex.EncodeToString(b)
	return name, s.exec(ctx, "CREATE DATABASE "+name)
}

// DropDatabase removes a database CreateDatabase made.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.exec(ctx, "DROP DATABASE IF EXISTS "+name)
}

// Exec runs one statement on the server, outside any test database.
func (s *Server) exec(ctx context.Context, stmt string) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}
