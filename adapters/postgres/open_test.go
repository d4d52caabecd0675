package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

var quiet = slog.New(slog.DiscardHandler)

// freshSchema names a schema for one test and drops it afterwards.
func freshSchema(t *testing.T) (*scratch.Server, string) {
	t.Helper()
	srv := sqltest.Postgres.Find(t)
	name := srv.NewSchemaName()
	t.Cleanup(func() { srv.DropSchema(context.Background(), name) })
	return srv, name
}

func open(t *testing.T, opts postgres.Options) *postgres.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := postgres.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// table is a table of the store in schema, quoted for hand-written SQL.
func table(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

func TestOpenRefusesBadConfiguration(t *testing.T) {
	srv, schema := freshSchema(t)
	ctx := context.Background()
	open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	cfg, err := pgx.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	// The same server, database and user, with what each case changes.
	dsn := func(user, password, database string, port uint16) string {
		if user == "" {
			user = cfg.User
		}
		if database == "" {
			database = cfg.Database
		}
		if port == 0 {
			port = cfg.Port
		}
		c := "host=" + cfg.Host + " port=" + strconvU(port) + " user=" + user + " dbname=" + database + " sslmode=disable"
		if password != "" {
			c += " password=" + password
		}
		return c
	}
	const secret = "not-the-password"
	// Wrong credentials need a user that must give a password: one made
	// here, refused by any server that does not trust every local login.
	user := "runstate_pw_" + strings.TrimPrefix(schema, "runstate_t_")
	if err := srv.Exec(ctx, "CREATE ROLE "+user+" LOGIN PASSWORD 'right-password'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Exec(ctx, "DROP ROLE IF EXISTS "+user) })
	// Does the server check passwords at all (pg_hba.conf may trust
	// every local login)? A plain connection with a wrong one says.
	probe, err := pgx.Connect(ctx, dsn(user, secret, "", 0))
	checksPasswords := err != nil
	if probe != nil {
		probe.Close(ctx)
	}

	for _, tc := range []struct {
		name string
		opts postgres.Options
		want error
	}{
		{"malformed DSN", postgres.Options{DSN: "postgres://u:" + secret + "@[::1"}, runstate.ErrInvalidArgument},
		{"malformed keywords", postgres.Options{DSN: "host=127.0.0.1 password=" + secret + " port=notaport"}, runstate.ErrInvalidArgument},
		{"unquoted password with a space", postgres.Options{DSN: "host=127.0.0.1 password=x " + secret + " dbname=test"}, runstate.ErrInvalidArgument},
		{"schema named like the server's", postgres.Options{DSN: srv.DSN(), Schema: "pg_runs"}, runstate.ErrInvalidArgument},
		{"unknown database", postgres.Options{DSN: dsn("", "", "runstate_no_such_db", 0)}, runstate.ErrInvalidArgument},
		{"server down", postgres.Options{DSN: dsn("", secret, "", 1)}, runstate.ErrUnavailable},
		{"bad schema name", postgres.Options{DSN: srv.DSN(), Schema: "Runs; DROP"}, runstate.ErrInvalidArgument},
		{"scratch without a name", postgres.Options{DSN: srv.DSN(), ScratchSchema: true}, runstate.ErrInvalidArgument},
		{"scratch on an existing schema", postgres.Options{DSN: srv.DSN(), Schema: schema, ScratchSchema: true}, runstate.ErrInvalidArgument},
		// A user the server lets in, with no right to create the schema.
		{"user without grants", postgres.Options{DSN: dsn(user, "right-password", "", 0), Schema: srv.NewSchemaName()}, runstate.ErrPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Logger = quiet
			_, err := postgres.Open(ctx, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v (code %q), want %s", err, runstate.CodeOf(err), runstate.CodeOf(tc.want))
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the password: %v", err)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		if !checksPasswords {
			t.Skip("this server trusts local logins (pg_hba.conf trust) and checks no password; the mapping of its refusal is TestErrorsMapToTheContract's")
		}
		_, err := postgres.Open(ctx, postgres.Options{DSN: dsn(user, secret, "", 0), Logger: quiet})
		if !errors.Is(err, runstate.ErrPermissionDenied) || strings.Contains(err.Error(), secret) {
			t.Fatalf("Open with a wrong password: %v, want PERMISSION_DENIED without the password", err)
		}
	})
}

func strconvU(p uint16) string {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + p%10)
		if p /= 10; p == 0 {
			return string(b[i:])
		}
	}
}

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	srv, schema := freshSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), postgres.Options{DSN: srv.DSN(), Schema: schema, Logger: quiet})
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
	s := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	// Each migration once: versions 1 to n, n rows.
	var got struct{ Rows, Latest int }
	if err := s.DB().Get(&got, "SELECT COUNT(*) AS rows, MAX(version) AS latest FROM runstate_schema_migrations"); err != nil || got.Rows != got.Latest || got.Latest < 2 {
		t.Fatalf("%d migration rows up to version %d (%v), want one per version", got.Rows, got.Latest, err)
	}
}

// A database that a newer build migrated is refused, not written.
func TestNewerSchemaIsRefused(t *testing.T) {
	srv, schema := freshSchema(t)
	s := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	if _, err := s.DB().Exec("INSERT INTO runstate_schema_migrations (version, name) VALUES (999, '999_future')"); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(context.Background(), postgres.Options{DSN: srv.DSN(), Schema: schema, Logger: quiet})
	if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "999") {
		t.Fatalf("Open on a newer schema: %v, want UNAVAILABLE naming version 999", err)
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	srv, schema := freshSchema(t)
	s := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	s.Close()
	if _, err := s.GetRun(context.Background(), "x"); !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("GetRun after Close: %v", err)
	}
	if _, err := s.CreateRun(context.Background(), runstate.CreateRunParams{WorkflowName: "w"}); !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("CreateRun after Close: %v", err)
	}
}

// A scratch schema is created by Open and dropped by Close; a schema that
// exists is refused, whatever it holds, and left as it was.
func TestScratchSchemaIsCreatedAndDropped(t *testing.T) {
	srv, name := freshSchema(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, postgres.Options{DSN: srv.DSN(), Schema: name, ScratchSchema: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		var found bool
		if err := s.DB().GetContext(ctx, &found, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name); err != nil {
			t.Fatal(err)
		}
		return found
	}
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatalf("no schema %s while its scratch store is open", name)
	}
	other := open(t, postgres.Options{DSN: srv.DSN(), Schema: name})
	if _, err := postgres.Open(ctx, postgres.Options{DSN: srv.DSN(), Schema: name, ScratchSchema: true, Logger: quiet}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("a second scratch store on an existing schema: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := other.GetRun(ctx, run.RunID); err != nil {
		t.Fatalf("the refused scratch store changed the schema: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetRun(ctx, run.RunID); err == nil {
		t.Fatal("the scratch schema is still there after Close")
	}
}

// blocker is a second session that holds the lock the adapter's call will
// wait for, and finds and ends the adapter's session.
type blocker struct {
	db *sql.DB
	tx *sql.Tx
}

func newBlocker(t *testing.T, srv *scratch.Server) *blocker {
	t.Helper()
	cfg, err := pgx.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return &blocker{db: db, tx: tx}
}

func (b *blocker) Exec(query string, args ...any) error {
	_, err := b.tx.Exec(query, args...)
	return err
}

func (b *blocker) Rollback() error { return b.tx.Rollback() }

// EndWaiter ends the backend of the adapter's session that waits for
// a lock in a statement beginning with waits, once it is waiting.
func (b *blocker) EndWaiter(t *testing.T, waits string, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the call returned before it waited: %v", err)
		default:
		}
		var n int
		err := b.db.QueryRow(`SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND application_name = 'runstate' AND starts_with(query, $1)`, waits).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatal("found no adapter session waiting to end")
}

// A backend ended (pg_terminate_backend) in the middle of a transaction:
// the caller gets UNAVAILABLE, nothing of the call is written, and the next
// call works on the same store.
func TestBackendTerminatedMidTransaction(t *testing.T) {
	srv, schema := freshSchema(t)
	sqltest.SessionEndedMidCall(t, open(t, postgres.Options{DSN: srv.DSN(), Schema: schema}),
		func(t *testing.T) sqltest.Blocker { return newBlocker(t, srv) },
		sqltest.SessionEndedSQL{
			// A lean write passes over the held row, and after its rounds
			// the locking way waits for it.
			LockRow: "SELECT run_id FROM " + table(schema, "runstate_runs") + " WHERE run_id = $1 FOR UPDATE", WaitsForRow: "SELECT r.run_id",
			// The lean write inserts both events in its one statement.
			InsertAudit: "INSERT INTO " + table(schema, "runstate_audit") + " (run_id, seq, event) VALUES ($1, $2, '{}')", WaitsForAudit: "WITH v AS"})
}

func ptr[T any](v T) *T { return &v }

// Every session tells the server to end it when it idles inside a
// transaction past the stalled session timeout, so a worker paused inside
// a transaction cannot hold its row locks indefinitely.
func TestSessionsEndWhenTheyStall(t *testing.T) {
	srv, schema := freshSchema(t)
	ctx := context.Background()
	s := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema, StalledSessionTimeout: 2 * time.Second})
	var got string
	if err := s.DB().GetContext(ctx, &got, "SHOW idle_in_transaction_session_timeout"); err != nil || got != "2s" {
		t.Fatalf("idle_in_transaction_session_timeout %q (%v), want 2s", got, err)
	}
	s2 := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	if err := s2.DB().GetContext(ctx, &got, "SHOW idle_in_transaction_session_timeout"); err != nil || got != "10s" {
		t.Fatalf("default idle_in_transaction_session_timeout %q (%v), want 10s", got, err)
	}
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"}); err != nil {
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
	if _, err := s2.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: 1, Message: ptr("after the stall")}); err != nil {
		t.Fatalf("the write waiting for the stalled session's lock: %v", err)
	}
	t.Logf("the stalled session's lock went after %v", time.Since(start).Round(100*time.Millisecond))
}
