package riverbench

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/internal/procfs"
)

// defaultMySQLDSN is the MySQL (MariaDB) server of the store comparison,
// unless RUNSTATE_MYSQL_DSN names another: root without a password on
// 127.0.0.1:3306. A database name in it is ignored.
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// mysqlServer is the MySQL server the comparison runs on.
type mysqlServer struct {
	base string // the DSN without a database name
	// pid is the server's process, or 0 when it is not visible from here:
	// then server CPU is not reported.
	pid int
}

// openMySQL finds the server, or skips when there is none.
func openMySQL(tb testing.TB) *mysqlServer {
	tb.Helper()
	dsn := cmp.Or(os.Getenv("RUNSTATE_MYSQL_DSN"), defaultMySQLDSN)
	base := dsn[:strings.LastIndexByte(dsn, '/')+1]
	db, err := sql.Open("mysql", base)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pidFile string
	if err := db.QueryRowContext(ctx, "SELECT @@pid_file").Scan(&pidFile); err != nil {
		tb.Skipf("no MySQL server (set RUNSTATE_MYSQL_DSN): %v", err)
	}
	s := &mysqlServer{base: base}
	if raw, err := os.ReadFile(pidFile); err == nil {
		s.pid, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
	}
	if s.pid == 0 {
		tb.Logf("the MySQL server's process is not visible here (pid file %s): server CPU is not reported", pidFile)
	}
	return s
}

// serverCPU is the server process's user and system time so far (every
// thread's): like PostgreSQL's figure, it counts every client of the
// server.
func (s *mysqlServer) serverCPU() time.Duration {
	st, err := procfs.Read(s.pid)
	if err != nil {
		return 0
	}
	return st.CPU
}

// BenchmarkWorkerByStore: the worker package end to end, as
// runstate-worker of BenchmarkEndToEnd, on PostgreSQL and on MySQL
// (MariaDB) on the same machine in one run: N runs created first, then
// one worker of W slots until every run is done. Units/s and server CPU
// per unit, to read MySQL's fleet beside PostgreSQL's.
func BenchmarkWorkerByStore(b *testing.B) {
	pg := openServer(b)
	my := openMySQL(b)
	for _, w := range workerCounts {
		b.Run(fmt.Sprintf("postgres/workers=%d", w), func(b *testing.B) {
			measure(b, pg, newRunstateWorker(w), 1)
		})
		b.Run(fmt.Sprintf("mysql/workers=%d", w), func(b *testing.B) {
			measureMySQL(b, my, w)
		})
	}
}

// measureMySQL runs the worker on a scratch database of the MySQL server
// and reports what measure reports but commits.
func measureMySQL(b *testing.B, srv *mysqlServer, slots int) {
	ctx := b.Context()
	units := max(b.N, minUnits)
	b.StopTimer()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	s, err := mysql.Open(ctx, mysql.Options{DSN: srv.base + "runstate_bench_" + hex.EncodeToString(suffix), ScratchDatabase: true,
		MaxOpenConns: poolSize, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close() // drops the database
	ids, err := createQueued(ctx, s, units)
	if err != nil {
		b.Fatal(err)
	}
	taken := newLedger[string]()
	serverBefore, clientBefore := srv.serverCPU(), processCPU()
	b.ResetTimer()
	if err := runWorker(ctx, s, slots, units, taken, benchTimer{b}); err != nil {
		b.Fatal(err)
	}
	serverAfter, clientAfter := srv.serverCPU(), processCPU()
	if err := taken.exactlyOnce(ids); err != nil {
		b.Fatal(err)
	}
	elapsed := b.Elapsed()
	perUnit := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(units) }
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(units), "ns/op")
	b.ReportMetric(float64(units)/elapsed.Seconds(), "units/s")
	if srv.pid != 0 {
		b.ReportMetric(perUnit(serverAfter-serverBefore), "server-cpu-ms/unit")
	}
	b.ReportMetric(perUnit(clientAfter-clientBefore), "client-cpu-ms/unit")
}

// createQueued creates n queued runs in batches.
func createQueued(ctx context.Context, s runstate.Store, n int) ([]string, error) {
	ids := make([]string, 0, n)
	for len(ids) < n {
		batch := make([]runstate.CreateRunParams, min(batchSize, n-len(ids)))
		for i := range batch {
			batch[i] = newRun()
		}
		res, err := runstate.CreateRuns(ctx, s, runstate.CreateRunsParams{Runs: batch})
		if err != nil {
			return nil, err
		}
		for _, r := range res.Runs {
			ids = append(ids, r.RunID)
		}
	}
	return ids, nil
}

// TestTheWorkerDoesItsWorkOnMySQL runs the MySQL side once on a few runs:
// every run done once, and success.
func TestTheWorkerDoesItsWorkOnMySQL(t *testing.T) {
	srv := openMySQL(t)
	ctx := t.Context()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	s, err := mysql.Open(ctx, mysql.Options{DSN: srv.base + "runstate_bench_" + hex.EncodeToString(suffix), ScratchDatabase: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids, err := createQueued(ctx, s, 60)
	if err != nil {
		t.Fatal(err)
	}
	taken := newLedger[string]()
	if err := runWorker(ctx, s, 8, len(ids), taken, noTimer{}); err != nil {
		t.Fatal(err)
	}
	if err := taken.exactlyOnce(ids); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		run, err := s.GetRun(ctx, id)
		if err != nil || run.Status != runstate.StatusSuccess {
			t.Fatalf("run %s: %s, %v", id, run.Status, err)
		}
	}
}
