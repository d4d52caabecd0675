// Package testserver finds a PostgreSQL server for tests: from the
// environment, on this machine, or started in Docker. It is the
// PostgreSQL engine of the shared SQL test environment (sqltest.Postgres).
package testserver

import (
	"testing"

	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// EnvDSN names the variable that points tests at a database, e.g.
// postgres://runstate:secret@db.local:5432/test?sslmode=disable.
const EnvDSN = sqltest.PostgresEnvDSN

// Find returns the shared server (sqltest.Engine.Find): skipped without
// one, failed under CI=true.
func Find(t testing.TB) *scratch.Server { t.Helper(); return sqltest.Postgres.Find(t) }

// Private is a server of one test's own, which it may kill and start again.
type Private = sqltest.Private[*scratch.Server]

// StartPrivate starts a private PostgreSQL server: skipped without its
// binaries, failed under CI=true.
func StartPrivate(t testing.TB) *Private { t.Helper(); return sqltest.Postgres.StartPrivate(t) }
