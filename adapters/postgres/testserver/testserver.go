// Package testserver finds a PostgreSQL server for tests: from the
// environment, on this machine, or started in Docker.
package testserver

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"

	"github.com/runstate/runstate/adapters/postgres/scratch"
)

// EnvDSN names the variable that points tests at a database, e.g.
// postgres://runstate:secret@db.local:5432/test?sslmode=disable.
const EnvDSN = "RUNSTATE_POSTGRES_DSN"

// localDSN is tried when EnvDSN is unset: Debian's PostgreSQL with trust
// authentication on 127.0.0.1.
const localDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var (
	serverOnce sync.Once
	server     *scratch.Server
	serverErr  error
)

// Find returns a server: from EnvDSN, else on 127.0.0.1:5432, else started
// in Docker with dockertest when an engine answers. Without one the test is
// skipped with a loud message, except under CI=true, where it fails: CI
// must never pass a PostgreSQL test it did not run.
func Find(t testing.TB) *scratch.Server {
	t.Helper()
	serverOnce.Do(func() { server, serverErr = find() })
	if serverErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no PostgreSQL server for the tests (CI=true forbids skipping): %v", serverErr)
		}
		t.Skipf("SKIPPING PostgreSQL tests: no server reachable: %v. Set %s or start PostgreSQL on 127.0.0.1:5432 with a database test.", serverErr, EnvDSN)
	}
	return server
}

func find() (*scratch.Server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		s, err := scratch.FromDSN(dsn, "environment")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvDSN, err)
		}
		return s, nil
	}
	local, localErr := scratch.FromDSN(localDSN, "local")
	if localErr == nil {
		return local, nil
	}
	s, err := fromDocker()
	if err != nil {
		return nil, fmt.Errorf("%s: %v; docker: %v", localDSN, localErr, err)
	}
	return s, nil
}

// fromDocker starts PostgreSQL 16 with dockertest. The container lives
// until the test process ends (dockertest's expiry removes it after 10
// minutes).
func fromDocker() (*scratch.Server, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, err
	}
	if err := pool.Client.Ping(); err != nil {
		return nil, fmt.Errorf("no Docker engine: %w", err)
	}
	res, err := pool.Run("postgres", "16", []string{"POSTGRES_PASSWORD=runstate", "POSTGRES_DB=test"})
	if err != nil {
		return nil, err
	}
	_ = res.Expire(600)
	dsn := fmt.Sprintf("postgres://postgres:runstate@127.0.0.1:%s/test?sslmode=disable", res.GetPort("5432/tcp"))
	var s *scratch.Server
	pool.MaxWait = 2 * time.Minute
	err = pool.Retry(func() (err error) {
		s, err = scratch.FromDSN(dsn, "docker")
		return err
	})
	return s, err
}
