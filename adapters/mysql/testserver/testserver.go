// Package testserver finds a MySQL server for tests: from the
// environment, on this machine, or started in Docker.
package testserver

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"

	"github.com/runstate/runstate/adapters/mysql/scratch"
)

// EnvDSN names the variable that points tests at a server, e.g.
// root:secret@tcp(db.local:3306)/ (a database name in it is ignored).
const EnvDSN = "RUNSTATE_MYSQL_DSN"

// localDSN is tried when EnvDSN is unset.
const localDSN = "root@tcp(127.0.0.1:3306)/"

var (
	serverOnce sync.Once
	server     *scratch.Server
	serverErr  error
)

// Find returns a server: from EnvDSN, else on 127.0.0.1:3306, else started
// in Docker with dockertest when an engine answers. Without one the test is
// skipped with a loud message, except under CI=true, where it fails: CI
// must never pass a MySQL test it did not run.
func Find(t testing.TB) *scratch.Server {
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

// fromDocker starts MySQL 8 with dockertest. The container lives until the
// test process ends (dockertest's expiry removes it after 10 minutes).
func fromDocker() (*scratch.Server, error) {
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
	dsn := fmt.Sprintf("root:runstate@tcp(127.0.0.1:%s)/", res.GetPort("3306/tcp"))
	var s *scratch.Server
	pool.MaxWait = 2 * time.Minute
	err = pool.Retry(func() (err error) {
		s, err = scratch.FromDSN(dsn, "docker")
		return err
	})
	return s, err
}
