// Package scratch names schemas on a PostgreSQL server, one per
// conformance check or test, and drops them. A schema, not a database: it
// is made in milliseconds where CREATE DATABASE copies a template. It does
// not depend on the adapter, so the adapter's own tests can use it, and it
// links nothing of Docker, so the conformance runner can.
package scratch

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Server is a PostgreSQL database to make scratch schemas in.
type Server struct {
	dsn string
	// Source says where the server came from (environment, local, docker).
	Source string
}

// FromDSN returns the database a DSN points at, after checking that it
// answers. source says where the DSN came from, for reports.
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
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return nil, err
	}
	return &Server{dsn: dsn, Source: source}, nil
}

// Ping checks that the database answers.
func (s *Server) Ping(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = 3 * time.Second
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return db.PingContext(ctx)
}

// DSN returns the server's DSN (the database of the schemas).
func (s *Server) DSN() string { return s.dsn }

// DSNIn returns the server's DSN with schema as its search_path, for a
// program that takes a DSN only (the schema must exist: CreateSchema).
func (s *Server) DSNIn(schema string) string {
	if strings.Contains(s.dsn, "://") {
		sep := "?"
		if strings.Contains(s.dsn, "?") {
			sep = "&"
		}
		return s.dsn + sep + "search_path=" + schema
	}
	return s.dsn + " search_path=" + schema
}

// ProxyAddr returns the server's TCP address (host:port) for a proxy to
// forward to, or why there is none: a server reached through a socket, or
// over TLS that verifies the server's name (sslmode=verify-full), which a
// proxy's address would not match.
func (s *Server) ProxyAddr() (string, error) {
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return "", err
	}
	switch {
	case strings.HasPrefix(cfg.Host, "/"):
		return "", fmt.Errorf("the server is reached through the socket %s, not TCP", cfg.Host)
	case cfg.TLSConfig != nil && !cfg.TLSConfig.InsecureSkipVerify:
		return "", errors.New("the server is reached over TLS that verifies its name (sslmode=verify-full)")
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// DSNVia returns the server's DSN with addr (host:port) in place of the
// server's address, for a connection through a proxy; every other setting
// stays.
func (s *Server) DSNVia(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if !strings.Contains(s.dsn, "://") {
		// Of repeated keywords the last counts.
		return s.dsn + " host=" + host + " port=" + port, nil
	}
	u, err := url.Parse(s.dsn)
	if err != nil {
		return "", fmt.Errorf("the server's DSN is not a URL pgx reads: %w", err)
	}
	q := u.Query()
	q.Del("host")
	q.Del("port")
	u.Host, u.RawQuery = addr, q.Encode()
	return u.String(), nil
}

// CreateSchema makes a schema with a fresh name and returns the name.
func (s *Server) CreateSchema(ctx context.Context) (string, error) {
	name := s.NewSchemaName()
	return name, s.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
}

// NewSchemaName returns a fresh name for a schema that does not exist yet.
func (s *Server) NewSchemaName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "runstate_t_" + hex.EncodeToString(b)
}

// DropSchema removes a schema and everything in it, if it exists.
func (s *Server) DropSchema(ctx context.Context, name string) error {
	return s.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
}

// Exec runs one statement on the server, on a connection of its own.
func (s *Server) Exec(ctx context.Context, stmt string, args ...any) error {
	db, err := s.open()
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt, args...)
	return err
}

func (s *Server) open() (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg), nil
}
