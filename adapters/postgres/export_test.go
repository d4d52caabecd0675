package postgres

import "github.com/jmoiron/sqlx"

// DB returns the connection pool, for tests that inspect the schema or
// race the adapter with hand-written SQL.
func (s *Store) DB() *sqlx.DB { return s.runs.DB() }
