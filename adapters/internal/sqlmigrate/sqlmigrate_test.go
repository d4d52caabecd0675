package sqlmigrate

import (
	"errors"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/runstate/runstate"
)

func TestLoadReadsFilesInVersionOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"m/010_later.sql": {Data: []byte("-- a comment\nCREATE TABLE b (x INT);\n")},
		"m/002_first.sql": {Data: []byte("CREATE TABLE a (\n  x INT\n);\nCREATE INDEX i ON a (x);\n")},
	}
	all, err := Load(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Version != 2 || all[1].Version != 10 || Latest(all) != 10 {
		t.Fatalf("loaded %+v", all)
	}
	if want := []string{"CREATE TABLE a (\n  x INT\n)", "CREATE INDEX i ON a (x)"}; !slices.Equal(all[0].Stmts, want) {
		t.Errorf("statements %q, want %q", all[0].Stmts, want)
	}
	for name, bad := range map[string]fstest.MapFS{
		"no number":   {"m/init.sql": {Data: []byte("SELECT 1;\n")}},
		"one version": {"m/001_a.sql": {Data: []byte("SELECT 1;\n")}, "m/001_b.sql": {Data: []byte("SELECT 2;\n")}},
		"none":        {},
	} {
		if _, err := Load(bad, "m"); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

func TestPendingRefusesANewerDatabase(t *testing.T) {
	all := []Migration{{Version: 1}, {Version: 2}, {Version: 3}}
	got, err := Pending(all, []int{1, 3})
	if err != nil || len(got) != 1 || got[0].Version != 2 {
		t.Fatalf("pending %+v, %v: want version 2", got, err)
	}
	if _, err := Pending(all, []int{1, 2, 3, 7}); !errors.Is(err, runstate.ErrUnavailable) {
		t.Fatalf("a database at version 7: %v, want UNAVAILABLE", err)
	}
}

func TestSplitKeepsARoutineBodyWhole(t *testing.T) {
	body := "DROP PROCEDURE IF EXISTS p;\n-- p does two things\nCREATE PROCEDURE p()\nBEGIN\n  DECLARE EXIT HANDLER FOR SQLEXCEPTION\n  BEGIN\n    ROLLBACK;\n  END;\n  SELECT 1;\nEND;\nSELECT 2;\n"
	want := []string{
		"DROP PROCEDURE IF EXISTS p",
		"CREATE PROCEDURE p()\nBEGIN\n  DECLARE EXIT HANDLER FOR SQLEXCEPTION\n  BEGIN\n    ROLLBACK;\n  END;\n  SELECT 1;\nEND",
		"SELECT 2",
	}
	if got := Split(body); !slices.Equal(got, want) {
		t.Errorf("statements %q, want %q", got, want)
	}
}
