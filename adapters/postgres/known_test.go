package postgres_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// The handle's known rows (sqlkit's known.go): a write after its own is
// one statement, and a row written elsewhere, or kept with a time ahead of
// the database's, is read again.
func TestKnownRows(t *testing.T) {
	sqltest.KnownRows{Open: knownPair, Now: `SELECT clock_timestamp()`}.Run(t)
}

// knownPair opens two handles on one fresh schema: the first counted on c.
func knownPair(t *testing.T, c *benchutil.Counter) (counted, other sqltest.KnownStore) {
	t.Helper()
	srv := sqltest.Postgres.Find(t)
	schema := srv.NewSchemaName()
	ctx := context.Background()
	first, err := postgres.OpenCounting(ctx, postgres.Options{DSN: srv.DSN(), Schema: schema, ScratchSchema: true, Logger: quiet}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	second, err := postgres.Open(ctx, postgres.Options{DSN: srv.DSN(), Schema: schema, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { second.Close() })
	return first, second
}
