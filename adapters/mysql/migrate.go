package mysql

import (
	"context"
	"database/sql"
	"embed"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the migrations the database lacks. A named lock makes
// processes that open the database at the same time take turns; the
// applied versions are recorded in runstate_schema_migrations.
func migrate(ctx context.Context, db *sqlx.DB) error {
	all, err := sqlmigrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	conn, err := db.Connx(ctx) // GET_LOCK belongs to one connection
	if err != nil {
		return err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.GetContext(ctx, &got, qMigrationLock); err != nil {
		return err
	}
	if !got.Valid || got.Int64 != 1 {
		return runstate.Unavailable("another process held the runstate migration lock for 60s", nil)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), qMigrationUnlock)
	if _, err := conn.ExecContext(ctx, qCreateMigrationsTable); err != nil {
		return err
	}
	var applied []int
	if err := conn.SelectContext(ctx, &applied, qAppliedMigrations); err != nil {
		return err
	}
	return sqlmigrate.Apply(ctx, conn, all, applied, qRecordMigration)
}
