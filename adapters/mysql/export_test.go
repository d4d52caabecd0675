package mysql

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

// DB returns the connection pool, for tests that inspect the schema or
// race the adapter with hand-written SQL.
func (s *Store) DB() *sqlx.DB { return s.runs.DB() }

// OpenCounting is Open with the statements and commits of the store's
// connections counted on c.
func OpenCounting(ctx context.Context, opts Options, c *benchutil.Counter) (*Store, error) {
	return open(ctx, opts, c.Wrap)
}

// ShiftKnownTimes moves the database time of the rows the handle keeps
// (sqlkit's known.go) by d, as a client clock running fast would.
func (s *Store) ShiftKnownTimes(d time.Duration) { s.runs.ShiftKnownTimes(d) }
