package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

var quiet = slog.New(slog.DiscardHandler)

// freshDB makes a database for one test and drops it afterwards.
func freshDB(t *testing.T) (*scratch.Server, string) {
	t.Helper()
	srv := sqltest.MySQL.Find(t)
	name, err := srv.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropDatabase(context.Background(), name) })
	return srv, name
}

func open(t *testing.T, dsn string) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(context.Background(), mysql.Options{DSN: dsn, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenRefusesBadConfiguration(t *testing.T) {
	srv, db := freshDB(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, dsn string
		want      error
	}{
		{"malformed DSN", "root@tcp(127.0.0.1:3306", runstate.ErrInvalidArgument},
		{"no database", "root@tcp(127.0.0.1:3306)/", runstate.ErrInvalidArgument},
		{"unknown database", strings.Replace(srv.DSN(db), db, "runstate_no_such_db", 1), runstate.ErrInvalidArgument},
		{"server down", "root@tcp(127.0.0.1:1)/" + db, runstate.ErrUnavailable},
		{"wrong credentials", "root:not-the-password@tcp(127.0.0.1:3306)/" + db, runstate.ErrPermissionDenied},
		{"unknown user", "nobody_at_all:x@tcp(127.0.0.1:3306)/" + db, runstate.ErrPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mysql.Open(ctx, mysql.Options{DSN: tc.dsn, Logger: quiet})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v (code %q), want %s", err, runstate.CodeOf(err), runstate.CodeOf(tc.want))
			}
			if strings.Contains(err.Error(), "not-the-password") {
				t.Errorf("the error shows the password: %v", err)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	srv, db := freshDB(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := mysql.Open(context.Background(), mysql.Options{DSN: srv.DSN(db), Logger: quiet})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
	s := open(t, srv.DSN(db))
	files, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var n, versions int
	if err := s.DB().QueryRow("SELECT COUNT(*), COUNT(DISTINCT version) FROM runstate_schema_migrations").Scan(&n, &versions); err != nil || n != len(files) || versions != n {
		t.Fatalf("%d migration rows of %d versions (%v), want %d, one per migration", n, versions, err, len(files))
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	srv, db := freshDB(t)
	s := open(t, srv.DSN(db))
	s.Close()
	if _, err := s.GetRun(context.Background(), "x"); !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("GetRun after Close: %v", err)
	}
	if _, err := s.CreateRun(context.Background(), runstate.CreateRunParams{WorkflowName: "w"}); !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("CreateRun after Close: %v", err)
	}
}

// blocker is a second session on the database that holds the lock the
// adapter's call will wait for; admin is a connection to the server with no
// database selected, which finds and kills the adapter's connections.
type blocker struct {
	admin  *sql.DB
	conn   *sql.Conn
	tx     *sql.Tx
	id     int64
	dbName string
}

func newBlocker(t *testing.T, srv *scratch.Server, db string) *blocker {
	t.Helper()
	ctx := context.Background()
	admin, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := sql.Open("mysql", srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sessions.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := &blocker{admin: admin, conn: conn, dbName: db}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&b.id); err != nil {
		t.Fatal(err)
	}
	if b.tx, err = conn.BeginTx(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.tx.Rollback(); conn.Close(); sessions.Close(); admin.Close() })
	return b
}

// killWaiter waits until one of the adapter's connections to dbName is
// running a statement that starts like stmt (the one the blocker's lock
// holds up), then kills it and every other connection to dbName but the
// blocker's, and reports how many it killed. (MariaDB may take a primary-key
// row lock while optimizing, where INNODB_TRX does not list the wait, so the
// statement itself is what is watched.)
func (b *blocker) killWaiter(t *testing.T, dbName, stmt string, done <-chan error) int {
	t.Helper()
	ctx := context.Background()
	var waiter int64
	for deadline := time.Now().Add(10 * time.Second); waiter == 0; {
		err := b.admin.QueryRowContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
			WHERE DB = ? AND ID <> ? AND COMMAND = 'Query' AND INFO LIKE CONCAT(?, '%') LIMIT 1`, dbName, b.id, stmt).Scan(&waiter)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the call returned before it waited for the lock: %v", err)
		default:
		}
		if waiter == 0 && time.Now().After(deadline) {
			t.Fatalf("no connection to %s ran %q within 10s", dbName, stmt)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ids := []int64{waiter}
	rows, err := b.admin.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID NOT IN (?, ?)`, dbName, b.id, waiter)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	killed := 0
	for _, id := range ids {
		_, err := b.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		var me *gomysql.MySQLError
		switch {
		case err == nil:
			killed++
		case errors.As(err, &me) && me.Number == 1094: // unknown thread: it ended meanwhile
		default:
			t.Fatalf("KILL %d: %v", id, err)
		}
	}
	return killed
}

func (b *blocker) Exec(query string, args ...any) error {
	_, err := b.tx.Exec(query, args...)
	return err
}

func (b *blocker) EndWaiter(t *testing.T, waits string, done <-chan error) {
	if b.killWaiter(t, b.dbName, waits, done) == 0 {
		t.Fatal("found no adapter connection to kill")
	}
}

func (b *blocker) Rollback() error { return b.tx.Rollback() }

// A connection killed (KILL CONNECTION) in the middle of a call: the
// caller gets UNAVAILABLE, nothing of the call is written, and the next
// call works on the same store.
func TestConnectionKilledMidCall(t *testing.T) {
	srv, db := freshDB(t)
	sqltest.SessionEndedMidCall(t, open(t, srv.DSN(db)), func(t *testing.T) sqltest.Blocker { return newBlocker(t, srv, db) },
		sqltest.SessionEndedSQL{
			// A lean write passes over the held row, and after its rounds
			// the locking way waits for it.
			LockRow: "SELECT run_id FROM runstate_runs WHERE run_id = ? FOR UPDATE", WaitsForRow: "SELECT r.run_id",
			// The lean write's call is held up at its INSERT of both events
			// (the process list shows a call's statement running).
			InsertAudit: "INSERT INTO runstate_audit (run_id, seq, event) VALUES (?, ?, '{}')", WaitsForAudit: "INSERT INTO runstate_audit"})
}

// A scratch database is created by Open and dropped by Close; a database
// that exists is refused, whatever it holds, and left as it was.
func TestScratchDatabaseIsCreatedAndDropped(t *testing.T) {
	srv := sqltest.MySQL.Find(t)
	ctx := context.Background()
	name := fmt.Sprintf("runstate scratch-%d`x", time.Now().UnixNano()) // a name that needs quoting
	t.Cleanup(func() { srv.DropDatabase(ctx, "`"+strings.ReplaceAll(name, "`", "``")+"`") })
	exists := func(name string) bool {
		db, err := sql.Open("mysql", srv.DSN(""))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	s, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet, ScratchDatabase: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w", Steps: []runstate.StepSpec{{Name: "s"}}}); err != nil {
		t.Fatal(err)
	}
	if !exists(name) {
		t.Fatalf("no database %q while its scratch store is open", name)
	}
	// Another scratch store cannot take the same database.
	if _, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet, ScratchDatabase: true}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("a second scratch store on an existing database: %v, want INVALID_ARGUMENT", err)
	}
	if err := s.Close(); err != nil || exists(name) {
		t.Fatalf("closing the scratch store: %v, database still exists: %v", err, exists(name))
	}

	// An existing database with a run in it is refused and survives.
	kept, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropDatabase(ctx, kept) })
	s = open(t, srv.DSN(kept))
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w", Steps: []runstate.StepSpec{{Name: "s"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mysql.Open(ctx, mysql.Options{DSN: srv.DSN(kept), Logger: quiet, ScratchDatabase: true})
	if !errors.Is(err, runstate.ErrInvalidArgument) || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a scratch store on an existing database: %v, want INVALID_ARGUMENT saying it exists", err)
	}
	if _, err := s.GetRun(ctx, run.RunID); err != nil || !exists(kept) {
		t.Fatalf("the existing database lost its run: %v", err)
	}
}

// A database created when missing is kept: the next Open, as a plugin
// started again after a kill, finds its predecessor's runs. The option
// does not go with a scratch database, which is dropped.
func TestCreateDatabaseWhenMissingKeepsIt(t *testing.T) {
	srv := sqltest.MySQL.Find(t)
	ctx := context.Background()
	name := fmt.Sprintf("runstate_created_%d", time.Now().UnixNano())
	t.Cleanup(func() { srv.DropDatabase(ctx, name) })
	s, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet, CreateDatabase: true})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet, CreateDatabase: true})
	if err != nil {
		t.Fatalf("opening the created database again: %v", err)
	}
	defer again.Close()
	if got, err := again.GetRun(ctx, run.RunID); err != nil || got.Version != run.Version {
		t.Fatalf("the run written before: %+v %v", got, err)
	}
	_, err = mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet, CreateDatabase: true, ScratchDatabase: true})
	if !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("create_database with scratch_database: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := again.GetRun(ctx, run.RunID); err != nil {
		t.Fatalf("the refused Open touched the database: %v", err)
	}
}

// Every session of the store tells the server to end it after the stalled
// session timeout, so a worker paused inside a transaction cannot hold its
// row locks for the server's default eight hours.
func TestSessionsEndWhenTheyStall(t *testing.T) {
	srv, db := freshDB(t)
	ctx := context.Background()
	s, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(db), Logger: quiet, StalledSessionTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got int
	if err := s.DB().GetContext(ctx, &got, "SELECT @@SESSION.wait_timeout"); err != nil || got != 3 {
		t.Fatalf("session wait_timeout %d (%v), want 3", got, err)
	}
	s2 := open(t, srv.DSN(db))
	if err := s2.DB().GetContext(ctx, &got, "SELECT @@SESSION.wait_timeout"); err != nil || got != 10 {
		t.Fatalf("default session wait_timeout %d (%v), want 10", got, err)
	}
	// A session that stalls past it is ended, and its row lock goes with it.
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w", Steps: []runstate.StepSpec{{Name: "s"}}}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT run_id FROM runstate_runs WHERE run_id = 'r1' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	msg := "after the stall"
	if _, err := s2.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: 1, Message: &msg}); err != nil {
		t.Fatalf("the write waiting for the stalled session's lock: %v", err)
	}
	t.Logf("the stalled session's lock went after %v", time.Since(start).Round(100*time.Millisecond))
}

// A user without the privileges of migration 002's procedures (CREATE
// ROUTINE) cannot open a new database: Open says so with
// ErrPermissionDenied, not as an outage.
func TestOpenWithoutRoutinePrivilegesIsPermissionDenied(t *testing.T) {
	srv, db := freshDB(t)
	ctx := context.Background()
	admin, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	user := "rs_" + db[len(db)-8:]
	for _, stmt := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON " + db + ".* TO '" + user + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'%'") })
	cfg, err := gomysql.ParseDSN(srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, "pw"
	_, err = mysql.Open(ctx, mysql.Options{DSN: cfg.FormatDSN(), Logger: quiet})
	if !errors.Is(err, runstate.ErrPermissionDenied) {
		t.Fatalf("Open without CREATE ROUTINE: %v (code %q), want PERMISSION_DENIED", err, runstate.CodeOf(err))
	}
	t.Logf("Open says: %v", err)
}
