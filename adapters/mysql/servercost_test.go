package mysql_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate/internal/procfs"
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

// serverCPU is the CPU time the local server process has used, when the
// server runs on this machine (ok false otherwise).
func serverCPU() (cpu time.Duration, ok bool) {
	for _, name := range []string{"mariadbd", "mysqld"} {
		out, err := exec.Command("pidof", "-s", name).Output()
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			return 0, false
		}
		p, err := procfs.Read(pid)
		if err != nil {
			return 0, false
		}
		return p.CPU, true
	}
	return 0, false
}

// measureServer reports the server's work per operation for what runs
// between its call and the returned function's, and its CPU time per
// operation when it runs on this machine. The counters are the whole
// server's: run benchmarks alone on it.
func measureServer(b *testing.B, db *sqlx.DB) (done func()) {
	b.Helper()
	before := readServerCounters(b, db)
	cpuBefore, cpuOK := serverCPU()
	return func() {
		if cpuAfter, ok := serverCPU(); ok && cpuOK {
			b.ReportMetric(float64((cpuAfter-cpuBefore).Microseconds())/float64(b.N), "server-cpu-µs/op")
		}
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
