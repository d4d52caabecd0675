// Package testserver finds a MySQL server for tests: from the
// environment, on this machine, or started in Docker. It is the MySQL
// engine of the shared SQL test environment (sqltest.MySQL).
package testserver

import (
	"testing"

	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// EnvDSN names the variable that points tests at a server, e.g.
// root:secret@tcp(db.local:3306)/ (a database name in it is ignored).
const EnvDSN = sqltest.MySQLEnvDSN

// Find returns the shared server (sqltest.Engine.Find): skipped without
// one, failed under CI=true.
func Find(t testing.TB) *scratch.Server { t.Helper(); return sqltest.MySQL.Find(t) }

// Private is a server of one test's own, which it may kill and start again.
type Private = sqltest.Private[*scratch.Server]

// StartPrivate starts a private MariaDB (or MySQL) server: skipped
// without the server's binaries, failed under CI=true.
func StartPrivate(t testing.TB) *Private { t.Helper(); return sqltest.MySQL.StartPrivate(t) }
