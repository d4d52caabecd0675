package postgres

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrate creates the schema when asked (scratch: it must not exist yet)
// and applies the migrations the database lacks, all in one transaction:
// PostgreSQL's DDL is transactional, so a migration is applied whole or
// not at all. A transaction-scoped advisory lock makes processes that open
// the database at the same time take turns; the applied versions are
// recorded in runstate_schema_migrations.
func (s *Store) migrate(ctx context.Context, scratch bool) error {
	all, err := sqlmigrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	return s.runs.InTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, qMigrationLockWait); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qMigrationLock, "runstate.migrate."+s.schema); err != nil {
			if hasState(err, stateLockNotAvailable) {
				return runstate.Unavailable("another process held the runstate migration lock for 60s", nil)
			}
			return err
		}
		if err := s.createSchema(ctx, tx, scratch); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qCreateMigrationsTable); err != nil {
			return err
		}
		var applied []int
		if err := tx.SelectContext(ctx, &applied, qAppliedMigrations); err != nil {
			return err
		}
		return sqlmigrate.Apply(ctx, tx, all, applied, qRecordMigration)
	})
}

// createSchema makes Options.Schema: a scratch one must not exist yet.
func (s *Store) createSchema(ctx context.Context, tx *sqlx.Tx, scratch bool) error {
	if s.schema == "" {
		return nil
	}
	name := pgx.Identifier{s.schema}.Sanitize()
	if !scratch {
		var exists bool
		if err := tx.GetContext(ctx, &exists, qSchemaExists, s.schema); err != nil || exists {
			return err // CREATE … IF NOT EXISTS needs the CREATE privilege even when the schema exists
		}
		_, err := tx.ExecContext(ctx, qCreateSchemaIfNone+name)
		return err
	}
	if _, err := tx.ExecContext(ctx, qCreateSchema+name); err != nil {
		if hasState(err, stateDuplicateSchema) {
			return runstate.InvalidArgument("schema", "%s exists: a scratch schema is created by Open and dropped by Close, "+
				"so it must not exist beforehand (name a new one, e.g. runs_{{unique}} with conformance-runner)", s.schema)
		}
		return err
	}
	return nil
}
