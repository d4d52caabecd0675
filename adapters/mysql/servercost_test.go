package mysql_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jmoiron/sqlx"
)

// serverCounters are the server's global counters a benchmark reports per
// operation: statements sent, rows InnoDB read, index entries walked,
// row-lock waits and deadlocks, and file syncs.
var serverCounters = []struct{ status, metric string }{
	{"Questions", "stmts/op"},
	{"Rows_read", "rows-read/op"},
	{"Handler_read_next", "index-next/op"},
	{"Handler_read_key", "index-lookups/op"},
	{"Innodb_row_lock_waits", "lock-waits/op"},
	{"Innodb_deadlocks", "deadlocks/op"},
	{"Innodb_data_fsyncs", "fsyncs/op"},
}

func readServerCounters(b *testing.B, db *sqlx.DB) map[string]float64 {
	b.Helper()
	rows, err := db.QueryContext(context.Background(), "SHOW GLOBAL STATUS")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			b.Fatal(err)
		}
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// measureServer reports the server's work per operation for what runs
// between its call and the returned function's. The counters are the
// whole server's: run benchmarks alone on it.
func measureServer(b *testing.B, db *sqlx.DB) (done func()) {
	b.Helper()
	before := readServerCounters(b, db)
	return func() {
		after := readServerCounters(b, db)
		for _, c := range serverCounters {
			// The two SHOW statements are not the benchmark's.
			d := after[c.status] - before[c.status]
			if c.status == "Questions" {
				d--
			}
			b.ReportMetric(d/float64(b.N), c.metric)
		}
	}
}
