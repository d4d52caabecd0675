package mysql

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate/spec"
)

//go:embed migrations/*.sql
var migrations embed.FS

type migration struct {
	version int
	name    string
	stmts   []string
}

// loadMigrations reads the embedded files NNN_name.sql in version order.
func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "migrations/"), ".sql")
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", f)
		}
		body, err := migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, stmts: splitStatements(string(body))})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// splitStatements splits a migration on semicolons that end a line, after
// dropping comment lines. Migrations are ours: no semicolon ends a line
// inside a string.
func splitStatements(body string) []string {
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
			lines = append(lines, l)
		}
	}
	var out []string
	for _, stmt := range strings.SplitAfter(strings.Join(lines, "\n"), ";\n") {
		if stmt = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(stmt), ";")); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}

// migrate applies the migrations the database lacks. A named lock makes
// processes that open the database at the same time take turns; the
// applied versions are recorded in runstate_schema_migrations.
func migrate(ctx context.Context, db *sqlx.DB) error {
	all, err := loadMigrations()
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
		return spec.Unavailable("another process held the runstate migration lock for 60s", nil)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), qMigrationUnlock)
	if _, err := conn.ExecContext(ctx, qCreateMigrationsTable); err != nil {
		return err
	}
	var applied []int
	if err := conn.SelectContext(ctx, &applied, qAppliedMigrations); err != nil {
		return err
	}
	if n := len(applied); n > 0 && applied[n-1] > all[len(all)-1].version {
		return spec.Unavailable(fmt.Sprintf("the database has schema version %d; this build knows up to %d", applied[n-1], all[len(all)-1].version), nil)
	}
	for _, m := range all {
		if slices.Contains(applied, m.version) {
			continue
		}
		for _, stmt := range m.stmts {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, qRecordMigration, m.version, m.name); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}
