// Package sqlmigrate reads the embedded, versioned migrations of the SQL
// adapters. Each adapter applies them its own way, under its database's
// lock; what a migration file is, and how it is read, lives here.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
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
// string.
func Split(body string) []string {
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
