// Package sqlmigrate reads the embedded, versioned migrations of the SQL
// adapters. Each adapter applies them its own way, under its database's
// lock; what a migration file is, and how it is read, lives here.
package sqlmigrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/runstate/runstate"
)

// Migration is one file NNN_name.sql: its version, name and statements.
type Migration struct {
	Version int
	Name    string
	Stmts   []string
}

// Load reads the files dir/NNN_name.sql of fsys in version order. A file
// whose name does not start with a number, or two files with one version,
// are an error: the build would otherwise apply a schema nobody wrote.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	var out []Migration
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".sql")
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", f)
		}
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, Stmts: Split(string(body))})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s have one version", out[i-1].Name, out[i].Name)
		}
	}
	return out, nil
}

// Latest returns the highest version of all (sorted by Load).
func Latest(all []Migration) int { return all[len(all)-1].Version }

// Split splits a migration on semicolons that end a line, after dropping
// comment lines. Migrations are ours: no semicolon ends a line inside a
// string. A stored routine's body, from a line that is BEGIN alone to the
// line END; that closes it (blocks nest), stays in one statement.
func Split(body string) []string {
	var out []string
	var stmt strings.Builder
	flush := func() {
		if s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(stmt.String()), ";")); s != "" {
			out = append(out, s)
		}
		stmt.Reset()
	}
	depth := 0
	for _, l := range strings.Split(body, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		stmt.WriteString(l)
		stmt.WriteString("\n")
		switch upper := strings.ToUpper(t); {
		case upper == "BEGIN":
			depth++
			continue
		case upper == "END;" || upper == "END":
			depth = max(depth-1, 0)
		}
		if depth == 0 && strings.HasSuffix(t, ";") {
			flush()
		}
	}
	flush()
	return out
}

// Pending returns the migrations of all (sorted by Load) whose versions
// applied lacks. A database with a version newer than all knows was
// migrated by a newer build: it is refused, never written.
func Pending(all []Migration, applied []int) ([]Migration, error) {
	if n := len(applied); n > 0 && slices.Max(applied) > Latest(all) {
		return nil, runstate.Unavailable(fmt.Sprintf("the database has schema version %d; this build knows up to %d", slices.Max(applied), Latest(all)), nil)
	}
	var out []Migration
	for _, m := range all {
		if !slices.Contains(applied, m.Version) {
			out = append(out, m)
		}
	}
	return out, nil
}

// Execer runs a statement: a connection or a transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Apply runs the pending migrations of all on db, each followed by record
// (an INSERT of version and name into the adapter's migrations table).
func Apply(ctx context.Context, db Execer, all []Migration, applied []int, record string) error {
	pending, err := Pending(all, applied)
	if err != nil {
		return err
	}
	for _, m := range pending {
		for _, stmt := range m.Stmts {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
		}
		if _, err := db.ExecContext(ctx, record, m.Version, m.Name); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}
