package mysql

import (
	"testing"
	"time"

	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

// A lean statement's tables go to the procedures as JSON rows: times as
// UTC DATETIME(6) text, a nil time null, a boolean 0 or 1, in column
// order; a write of one row goes as scalars to runstate_write_run.
func TestLeanArgsSendRowsAsTheProceduresReadThem(t *testing.T) {
	at := time.Date(2026, 11, 26, 5, 4, 3, 123456000, time.FixedZone("CET", 3600))
	two := sqlkit.Columns{[]string{"a", "b"}, []*time.Time{&at, nil}, []bool{true, false}, []int16{1, 2}}
	events := sqlkit.Columns{[]string{"a"}, []int64{7}, []string{`{"x":"<é>"}`}}
	query, args, err := leanArgs(qWriteRuns, []any{two, events, nil})
	if err != nil {
		t.Fatal(err)
	}
	if query != qWriteRuns || len(args) != 4 {
		t.Fatalf("%s with %d arguments, want %s with rows, events, clock and tag", query, len(args), qWriteRuns)
	}
	if want := `[["a","2026-11-26 04:04:03.123456",1,1],["b",null,0,2]]`; args[0] != want {
		t.Errorf("rows %v, want %s", args[0], want)
	}
	if want := `[["a",7,"{\"x\":\"\u003cé\u003e\"}"]]`; args[1] != want {
		t.Errorf("events %v, want %s", args[1], want)
	}
	if tag, ok := args[3].(int64); !ok || tag < 1 || tag > 1<<62 {
		t.Errorf("tag %v, want a number in [1, 2^62]", args[3])
	}

	one := sqlkit.Columns{[]string{"a"}, []*time.Time{&at}, []bool{true}, []int16{1}}
	query, args, err = leanArgs(qWriteRuns, []any{one, events, nil})
	if err != nil {
		t.Fatal(err)
	}
	if query != qWriteRun || len(args) != 7 || args[0] != "a" || args[1] != "2026-11-26 04:04:03.123456" || args[2] != 1 || args[3] != int16(1) {
		t.Fatalf("%s %v, want the row's values as scalars to %s", query, args, qWriteRun)
	}

	query, args, err = leanArgs(qInsertRuns, []any{two, events, events, true})
	if err != nil || query != qInsertRuns || len(args) != 3 {
		t.Fatalf("%s %v (%v), want three tables and no announcement", query, args, err)
	}
	if _, _, err := leanArgs(qWriteRuns, []any{sqlkit.Columns{[]string{"a", "b"}, []int64{1}}, events, nil}); err == nil {
		t.Error("columns of 2 and 1 rows were accepted")
	}
}
