package riverbench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate/internal/procfs"
)

const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// server is the PostgreSQL server both systems run on, seen through one
// monitoring connection to the DSN's own database. The monitor makes and
// drops the fresh databases and reads their statistics from outside them,
// so that its own queries never count in a benchmark's figures.
type server struct {
	dsn     string
	monitor *pgx.Conn
	// postmaster is the server's parent process, or 0 when its processes
	// are not visible from here (a server on another host or in a
	// container): then server CPU is not reported.
	postmaster int
}

// openServer connects to the server, or skips when there is none.
func openServer(tb testing.TB) *server {
	tb.Helper()
	dsn := cmp.Or(os.Getenv("RUNSTATE_POSTGRES_DSN"), defaultDSN)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Skipf("no PostgreSQL server (set RUNSTATE_POSTGRES_DSN): %v", err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	s := &server{dsn: dsn, monitor: conn}
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		tb.Fatal(err)
	}
	if st, err := procfs.Read(backend); err == nil {
		s.postmaster = st.PPID
	} else {
		tb.Logf("the server's processes are not visible here (%v): server CPU is not reported", err)
	}
	return s
}

// database is a fresh database on the server.
type database struct {
	name string
	dsn  string
}

// freshDatabase creates an empty database, dropped when tb ends.
func (s *server) freshDatabase(tb testing.TB) database {
	tb.Helper()
	ctx := context.Background()
	suffix := make([]byte, 6)
	rand.Read(suffix)
	name := "riverbench_" + hex.EncodeToString(suffix)
	if _, err := s.monitor.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if _, err := s.monitor.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("dropping %s: %v", name, err)
		}
	})
	dsn, err := dsnWithDatabase(s.dsn, name)
	if err != nil {
		tb.Fatal(err)
	}
	return database{name: name, dsn: dsn}
}

// dsnWithDatabase returns dsn with its database replaced, in either of the
// forms pgx reads.
func dsnWithDatabase(dsn, name string) (string, error) {
	if !strings.Contains(dsn, "://") {
		return dsn + " dbname=" + name, nil // of repeated keywords the last counts
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("the DSN is not a URL pgx reads: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// settle waits until no connection to db is left and every backend that
// served one has been reaped. A backend flushes its statistics when it
// exits (PostgreSQL 15 otherwise flushes an idle backend's at most every
// few seconds, and pg_stat_force_next_flush flushes only the caller's
// own), and a reaped backend's CPU time is in the postmaster's children
// time: after settle, both are complete and nothing is counted twice.
func (s *server) settle(ctx context.Context, tb testing.TB, db database) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var connected int
		err := s.monitor.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", db.name).Scan(&connected)
		if err != nil {
			tb.Fatal(err)
		}
		if connected == 0 && !s.exitingBackends(db) {
			return
		}
		if time.Now().After(deadline) {
			tb.Logf("%d connections to %s still open after 60 s; measuring anyway", connected, db.name)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exitingBackends reports whether a child of the postmaster still serves
// db (its process title names the database) or waits to be reaped.
func (s *server) exitingBackends(db database) bool {
	if s.postmaster == 0 {
		return false
	}
	for _, pid := range childrenOf(s.postmaster) {
		st, err := procfs.Read(pid)
		if err != nil {
			continue // gone since the listing
		}
		if st.State == 'Z' {
			return true
		}
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(title), db.name) {
			return true
		}
	}
	return false
}

// costs is what the server had spent at one moment.
type costs struct {
	serverCPU time.Duration
	commits   int64
}

// sample settles db and reads the costs so far.
func (s *server) sample(ctx context.Context, tb testing.TB, db database) costs {
	tb.Helper()
	s.settle(ctx, tb, db)
	var c costs
	// The monitor reads outside any transaction, but a snapshot of the
	// statistics could still be cached: drop it first.
	if _, err := s.monitor.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		tb.Fatal(err)
	}
	err := s.monitor.QueryRow(ctx, "SELECT coalesce(xact_commit, 0) FROM pg_stat_database WHERE datname = $1", db.name).Scan(&c.commits)
	if err != nil {
		tb.Fatal(err)
	}
	if s.postmaster != 0 {
		c.serverCPU = s.serverCPU()
	}
	return c
}

// serverCPU sums the user and system time of every server process: the
// postmaster with its reaped children, and its live children (backends,
// checkpointer, WAL writer, autovacuum…). It includes every other client
// of the server: measure on a quiet one. A child reaped while the children
// are read (an autovacuum worker ending) would be in neither sum, so the
// reading is taken again until the postmaster's reaped time is the same
// before and after it.
func (s *server) serverCPU() time.Duration {
	var cpu time.Duration
	for range 20 {
		before, err := procfs.Read(s.postmaster)
		if err != nil {
			return 0
		}
		cpu = before.CPU + before.ReapedChildrenCPU
		for _, pid := range childrenOf(s.postmaster) {
			if st, err := procfs.Read(pid); err == nil {
				cpu += st.CPU + st.ReapedChildrenCPU
			}
		}
		if after, err := procfs.Read(s.postmaster); err == nil && after.ReapedChildrenCPU == before.ReapedChildrenCPU {
			break
		}
	}
	return cpu
}
