package mysql

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

// leanArgs readies a lean statement and its arguments
// (sqlkit.Dialect.LeanArgs) for the stored procedures of migration 002:
// each sqlkit.Columns becomes one JSON array of rows, a row an array of its
// values in column order, which the procedure reads with JSON_TABLE. A
// write (qWriteRuns) also gets its tag: a random number the rows it writes
// take as their row_version, by which the procedure tells them from rows
// written meanwhile by others, and which the locking way's UPDATEs, adding
// one to it, never come back to. A write of one row calls qWriteRun with
// the row's values as scalars instead: MariaDB's join of a table to
// JSON_TABLE costs more than the whole of that call. An insert's last
// argument, which asks for an announcement, is dropped: MySQL has none.
func leanArgs(query string, args []any) (string, []any, error) {
	if query == qInsertRuns {
		args = args[:len(args)-1]
	}
	if query == qWriteRuns {
		if rows, ok := args[0].(sqlkit.Columns); ok && len(rows) > 0 {
			if n, err := columnLen(rows[0]); err == nil && n == 1 {
				return writeOne(rows, args[1:])
			}
		}
	}
	out := make([]any, 0, len(args)+1)
	for _, a := range args {
		cols, ok := a.(sqlkit.Columns)
		if !ok {
			out = append(out, a)
			continue
		}
		text, err := rowsJSON(cols)
		if err != nil {
			return "", nil, err
		}
		out = append(out, text)
	}
	if query == qWriteRuns {
		out = append(out, writeTag())
	}
	return query, out, nil
}

// writeOne is qWriteRun's arguments for a write of one row: its values,
// then the events as JSON, the clock and the tag (rest is the events and
// the clock).
func writeOne(row sqlkit.Columns, rest []any) (string, []any, error) {
	out := make([]any, 0, len(row)+3)
	for _, c := range row {
		out = append(out, cell(c, 0))
	}
	events, ok := rest[0].(sqlkit.Columns)
	if !ok {
		return "", nil, fmt.Errorf("mysql: a write's events are %T", rest[0])
	}
	text, err := rowsJSON(events)
	if err != nil {
		return "", nil, err
	}
	return qWriteRun, append(out, text, rest[1], writeTag()), nil
}

// writeTag is a write's tag: at least 1, and so far below the largest
// BIGINT that adding one to it never overflows.
func writeTag() int64 { return 1 + rand.Int64N(1<<62) }

// rowsJSON encodes cols as a JSON array of rows. Times are UTC DATETIME(6)
// text, a nil time null, a boolean 0 or 1.
func rowsJSON(cols sqlkit.Columns) (string, error) {
	n := -1
	for _, c := range cols {
		l, err := columnLen(c)
		if err != nil {
			return "", err
		}
		if n >= 0 && l != n {
			return "", fmt.Errorf("mysql: lean columns of %d and %d rows", n, l)
		}
		n = l
	}
	rows := make([][]any, max(n, 0))
	for i := range rows {
		row := make([]any, len(cols))
		for j, c := range cols {
			row[j] = cell(c, i)
		}
		rows[i] = row
	}
	b, err := json.Marshal(rows)
	return string(b), err
}

// columnLen is the number of rows of a column.
func columnLen(c any) (int, error) {
	switch c := c.(type) {
	case []string:
		return len(c), nil
	case []int16:
		return len(c), nil
	case []int32:
		return len(c), nil
	case []int64:
		return len(c), nil
	case []bool:
		return len(c), nil
	case []time.Time:
		return len(c), nil
	case []*time.Time:
		return len(c), nil
	}
	return 0, fmt.Errorf("mysql: a lean column of %T", c)
}

// cell is row i of column c as a JSON value (columnLen accepted c).
func cell(c any, i int) any {
	switch c := c.(type) {
	case []string:
		return c[i]
	case []int16:
		return c[i]
	case []int32:
		return c[i]
	case []int64:
		return c[i]
	case []bool:
		if c[i] {
			return 1
		}
		return 0
	case []time.Time:
		return datetime(c[i])
	case []*time.Time:
		if c[i] == nil {
			return nil
		}
		return datetime(*c[i])
	}
	return nil
}

// datetime is t as DATETIME(6) text in UTC.
func datetime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }
