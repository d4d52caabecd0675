package mysql

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

// leanArgs readies a lean statement's arguments (sqlkit.Dialect.LeanArgs)
// for its stored procedure (migration 002): each sqlkit.Columns becomes
// one JSON array of rows, a row an array of its values in column order,
// which the procedure reads with JSON_TABLE. An insert's last argument,
// which asks for an announcement, is dropped: MySQL has none. A write
// (qWriteRuns) also
// gets its tag: a random number the rows it writes take as their
// row_version, by which the procedure tells them from rows written
// meanwhile by others, and which the locking way's UPDATEs, adding one to
// it, never come back to.
func leanArgs(query string, args []any) ([]any, error) {
	if query == qInsertRuns {
		args = args[:len(args)-1]
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
			return nil, err
		}
		out = append(out, text)
	}
	if query == qWriteRuns {
		out = append(out, writeTag())
	}
	return out, nil
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
