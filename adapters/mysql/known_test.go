package mysql_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// The handle's known rows (sqlkit's known.go): a write after its own is
// one call, and a row written elsewhere (by the locking way too, whose
// UPDATEs change row_version), or kept with a time ahead of the
// database's, is read again.
func TestKnownRows(t *testing.T) {
	sqltest.KnownRows{Open: knownPair, Now: `SELECT UTC_TIMESTAMP(6)`}.Run(t)
}

// knownPair opens two handles on one fresh database: the first counted on
// c.
func knownPair(t *testing.T, c *benchutil.Counter) (counted, other sqltest.KnownStore) {
	t.Helper()
	srv := sqltest.MySQL.Find(t)
	ctx := context.Background()
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := mysql.OpenCounting(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet}, c)
	if err != nil {
		t.Fatal(err)
	}
	second, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close(); second.Close(); srv.DropDatabase(ctx, name) })
	return first, second
}
