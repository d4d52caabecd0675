// Package testserver finds a MySQL server for tests and makes databases
// on it. It does not depend on the adapter, so the adapter's own tests can use it.
package testserver

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/ory/dockertest/v3"
)

// EnvDSN names the variable that points tests at a server, e.g.
// root:secret@tcp(db.local:3306)/ (a database name in it is ignored).
const EnvDSN = "RUNSTATE_MYSQL_DSN"

// localDSN is tried when EnvDSN is unset.
const localDSN = "root@tcp(127.0.0.1:3306)/"

// Server is a MySQL server tests may create databases on.
type Server struct {
	cfg *gomysql.Config
	// Source says where the server came from (environment, local, docker).
	Source string
}

var (
	serverOnce sync.Once
	server     *Server
	serverErr  error
)

// Find returns a server: from EnvDSN, else on 127.0.0.1:3306, else started
// in Docker with dockertest when an engine answers. Without one the test is
// skipped with a loud message, except under CI=true, where it fails: CI
// must never pass a MySQL test it did not run.
func Find(t testing.TB) *Server {
	t.Helper()
	serverOnce.Do(func() { server, serverErr = find() })
	if serverErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no MySQL server for the tests (CI=true forbids skipping): %v", serverErr)
		}
		t.Skipf("SKIPPING MySQL tests: no server reachable: %v. Set %s or start MariaDB/MySQL on 127.0.0.1:3306.", serverErr, EnvDSN)
	}
	return server
}

func find() (*Server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvDSN, err)
		}
		s := &Server{cfg: cfg, Source: "environment"}
		return s, s.ping()
	}
	cfg, _ := gomysql.ParseDSN(localDSN)
	local := &Server{cfg: cfg, Source: "local"}
	localErr := local.ping()
	if localErr == nil {
		return local, nil
	}
	s, err := fromDocker()
	if err != nil {
		return nil, fmt.Errorf("%s: %v; docker: %v", localDSN, localErr, err)
	}
	return s, nil
}

// FromDSN returns the server a DSN points at (its database name is
// ignored), after checking that it answers.
func FromDSN(dsn string) (*Server, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, Source: "dsn"}
	return s, s.ping()
}

func (s *Server) ping() error {
	cfg := s.cfg.Clone()
	cfg.DBName = ""
	cfg.Timeout = 3 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// fromDocker starts MySQL 8 with dockertest. The container lives until the
// test process ends (dockertest's expiry removes it after 10 minutes).
func fromDocker() (*Server, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, err
	}
	if err := pool.Client.Ping(); err != nil {
		return nil, fmt.Errorf("no Docker engine: %w", err)
	}
	res, err := pool.Run("mysql", "8.4", []string{"MYSQL_ROOT_PASSWORD=runstate"})
	if err != nil {
		return nil, err
	}
	_ = res.Expire(600)
	cfg, _ := gomysql.ParseDSN(fmt.Sprintf("root:runstate@tcp(127.0.0.1:%s)/", res.GetPort("3306/tcp")))
	s := &Server{cfg: cfg, Source: "docker"}
	pool.MaxWait = 2 * time.Minute
	if err := pool.Retry(s.ping); err != nil {
		return nil, err
	}
	return s, nil
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
