// Package postgres is the shared-store reference adapter on PostgreSQL 13
// or later: several worker processes use one database, claims use SELECT …
// FOR UPDATE SKIP LOCKED on partial indexes in claim order, and every write
// is a compare-and-set on the version column, committed with its audit rows.
//
// Time comes from the database server (statement_timestamp), one clock for
// every worker, so clock skew between workers cannot break leases.
//
// The driver is pgx (github.com/jackc/pgx/v5) through database/sql and
// sqlx, as the MySQL adapter uses sqlx: the two read alike.
package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlkit"
	"github.com/runstate/runstate/driver"
)

var (
	_ runstate.Store        = (*Store)(nil)
	_ runstate.BatchCreator = (*Store)(nil)
)

// Options configure Open.
type Options struct {
	// DSN in any form pgx accepts: a URL,
	// postgres://user:password@host:5432/runstate?sslmode=disable, or
	// keywords, host=db user=runstate dbname=runstate. As with libpq, the
	// password may instead come from PGPASSWORD or ~/.pgpass, which keeps
	// it out of command lines. It is never logged.
	DSN string
	// Schema holds runstate's tables (default: the connection's
	// search_path, usually public). Open creates it when it is missing.
	// Lower-case letters, digits and underscores, at most 63.
	Schema string
	// ScratchSchema makes Schema a scratch one, for a schema per
	// conformance check: Open creates it and Close drops it. Open refuses
	// a schema that exists already, so that no existing data can ever be
	// dropped.
	ScratchSchema bool
	// MaxOpenConns bounds the connection pool (default 32).
	MaxOpenConns int
	// GroupCommit configures how concurrent single writes share one
	// transaction (driver.GroupCommit). The zero value turns it on, with a
	// quarter of MaxOpenConns in flight at once; Off turns it off.
	GroupCommit driver.GroupCommit
	// StalledSessionTimeout is how long the server keeps a session that is
	// idle inside a transaction (default 10s; the server's
	// idle_in_transaction_session_timeout). It ends such a session and
	// rolls back its transaction: a worker that stalls inside a transaction
	// (a paused VM, SIGSTOP) holds its row locks, and so blocks the
	// takeover of its runs, no longer than this. A value in the DSN wins.
	StalledSessionTimeout time.Duration
	// NotifyRunnable makes this store announce, with NOTIFY, every run it
	// creates or makes claimable without a lease, to the workers waiting
	// in Store.WatchRunnable (on any handle of the same schema). It costs
	// the writes that announce one more statement, and PostgreSQL commits
	// transactions that notify one at a time; so it is off by default, and
	// on for processes whose submissions idle workers should see at once.
	NotifyRunnable bool
	// NotifyRuns makes this store announce, with NOTIFY, every write of a
	// run, to the watchers of that run in Store.WatchRun (on any handle of
	// the same schema): an operator's console follows runs without
	// polling. It costs what NotifyRunnable costs, on every write; so it is
	// off by default, and on for processes whose runs someone follows. (It
	// sets the session's runstate.notify_runs, which a trigger reads.)
	NotifyRuns bool
	// Logger receives the adapter's messages; defaults to slog.Default().
	Logger *slog.Logger
	// Clock, when set, replaces the database clock. Tests use it to move time
	// without sleeping; production leaves it nil, and the database server's
	// clock decides. The SQL is the same either way: the time is a bound
	// parameter that is NULL in production.
	Clock runstate.Clock
}

// Store is a runstate store in a PostgreSQL database.
type Store struct {
	driver.Store
	runs   *sqlkit.Driver
	log    *slog.Logger
	schema string // Options.Schema
	// scratch: Close drops the schema (Options.ScratchSchema).
	scratch bool
	// conn configures the connections that listen for announcements of
	// runnable runs (watch.go).
	conn *pgx.ConnConfig
	// closing ends when the store is closed, and with it every watch.
	closing context.Context
	stop    context.CancelFunc
	// runNotices hands the writes of runs that runListener hears to the
	// watches of WatchRun.
	runNotices  driver.RunNotices
	runListener struct {
		sync.Mutex
		started bool
	}
}

// schemaName is what Options.Schema may be: a name that needs no quoting
// in search_path.
// Names starting with pg_ are the server's.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to the database named by opts.DSN, checks it answers and
// applies the embedded migrations. A malformed DSN or schema name is
// ErrInvalidArgument, a server that cannot be reached ErrUnavailable,
// refused credentials ErrPermissionDenied.
func Open(ctx context.Context, opts Options) (*Store, error) { return open(ctx, opts, nil) }

// open is Open, with the driver's connector wrapped by wrap when set (a
// test's counting of statements and commits).
func open(ctx context.Context, opts Options, wrap func(sqldriver.Connector) sqldriver.Connector) (*Store, error) {
	cfg, err := pgx.ParseConfig(opts.DSN)
	if err != nil {
		return nil, dsnError(err)
	}
	if opts.Schema != "" && (!schemaName.MatchString(opts.Schema) || strings.HasPrefix(opts.Schema, "pg_")) {
		return nil, runstate.InvalidArgument("schema", "%q: use lower-case letters, digits and underscores (at most 63, not starting with a digit or pg_)", opts.Schema)
	}
	if opts.ScratchSchema && opts.Schema == "" {
		return nil, runstate.InvalidArgument("schema", "a scratch schema needs a name (Options.Schema)")
	}
	if opts.Schema != "" {
		cfg.RuntimeParams["search_path"] = opts.Schema
	}
	// Times cross the wire in binary; the zone only shapes text, such as
	// the server's own messages.
	cfg.RuntimeParams["timezone"] = "UTC"
	// Claims and writes rely on READ COMMITTED (a locking read sees the
	// latest committed row), whatever the database's or role's default.
	cfg.RuntimeParams["default_transaction_isolation"] = "read committed"
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = "runstate"
	}
	// Every statement is prepared once per connection (pgx's statement
	// cache) and planned once: the lean writes bind whole columns as
	// arrays, whose custom plans cost more to make, each time, than the
	// statement costs to run; and every statement here finds its rows
	// through an index whatever the values. A value in the DSN wins.
	if _, set := cfg.RuntimeParams["plan_cache_mode"]; !set {
		cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	stalled := opts.StalledSessionTimeout
	if stalled <= 0 {
		stalled = 10 * time.Second
	}
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(stalled.Milliseconds(), 10)
	}
	if opts.NotifyRuns {
		cfg.RuntimeParams[notifyRunsSetting] = "on"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second // a server that is down fails fast
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	if opts.Schema != "" {
		where += "/" + opts.Schema
	}
	kit := dialect
	if opts.NotifyRunnable {
		kit.OnRunnable = announceRunnable
	}
	var connector sqldriver.Connector = stdlib.GetConnector(*cfg)
	if wrap != nil {
		connector = wrap(connector)
	}
	db := sqlx.NewDb(sql.OpenDB(connector), "pgx")
	s := &Store{runs: sqlkit.New(sqlkit.Params{DB: db, Dialect: kit, Clock: opts.Clock, Where: where}), log: opts.Logger,
		schema: opts.Schema, conn: cfg}
	s.closing, s.stop = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.Default()
	}
	sqlkit.ConfigurePool(db, opts.MaxOpenConns)
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(s.runs.OpenError(err), s.Close())
	}
	if err := s.migrate(ctx, opts.ScratchSchema); err != nil {
		return nil, errors.Join(s.runs.OpenError(err), s.Close())
	}
	s.scratch = opts.ScratchSchema
	s.Store = driver.WrapWith(s.runs, driver.WrapOptions{GroupCommit: sqlkit.GroupCommit(opts.GroupCommit, opts.MaxOpenConns), Logger: s.log})
	return s, nil
}

// announceRunnable tells the workers that watch (Options.NotifyRunnable)
// that a run became claimable without a lease: once per transaction, sent
// at its commit, or after the commit of a lean write (a statement of its
// own).
func announceRunnable(ctx context.Context, tx sqlx.ExecerContext) error {
	_, err := tx.ExecContext(ctx, qNotifyRunnable)
	return err
}

// dsnError words a DSN that does not parse. pgx's own message quotes the
// DSN with the password masked as well as it can guess; the message here
// quotes none of it.
func dsnError(err error) error {
	// pgx's reason may quote part of the DSN (a word of an unquoted
	// password): none of it is repeated.
	return runstate.InvalidArgument("dsn", "does not parse (expected postgres://user:password@host:5432/database, or host=… user=… dbname=… "+
		"with values that hold spaces in single quotes)")
}

// Close closes the connection pool, after dropping the schema if Open
// created it (Options.ScratchSchema); later calls return
// runstate.ErrUnavailable.
func (s *Store) Close() error {
	if !s.runs.MarkClosed() {
		return nil
	}
	s.stop()
	var err error
	if s.scratch {
		// A plugin host allows its plugin 2 s to stop: the drop is one statement.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, dropErr := s.runs.DB().ExecContext(ctx, qDropSchema+pgx.Identifier{s.schema}.Sanitize()+cascade); dropErr != nil {
			err = runstate.Unavailable(fmt.Sprintf("the scratch schema %s of %s was not dropped; drop it by hand", s.schema, s.runs.Where()), interpretError(dropErr))
		}
	}
	return errors.Join(err, interpretError(s.runs.DB().Close()))
}

// SQLSTATE codes the adapter interprets.
const (
	stateUniqueViolation      = "23505"
	stateInvalidPassword      = "28P01"
	stateInvalidAuthorization = "28000"
	stateInsufficientPrivs    = "42501"
	stateUnknownDatabase      = "3D000"
	stateInvalidSchemaName    = "3F000"
	stateDuplicateSchema      = "42P06"
	stateDeadlock             = "40P01"
	stateSerialization        = "40001"
	stateLockNotAvailable     = "55P03"
	stateTooManyConnections   = "53300"
	stateAdminShutdown        = "57P01" // pg_terminate_backend, or a server shutting down
	stateCrashShutdown        = "57P02"
	stateCannotConnectNow     = "57P03"
	stateIdleInTxTimeout      = "25P03"
	classConnectionException  = "08"
)

// retryable is the dialect's Retryable: the server rolled the
// transaction back (a deadlock, a serialization failure).
func retryable(err error) bool {
	return hasState(err, stateDeadlock) || hasState(err, stateSerialization)
}

// hasState reports a server error of SQLSTATE code.
func hasState(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// interpretError is the dialect's Interpret: SQLSTATE codes, failed
// connects and pgx's lost connections (a backend terminated, a server
// restarted) to the contract's codes. pgx honours every statement's
// context on a slow link (FAULT-007).
func interpretError(err error) error {
	var pe *pgconn.PgError
	switch {
	case sqlkit.Passes(err):
		return err
	case errors.As(err, &pe):
		switch {
		case pe.Code == stateUniqueViolation:
			return sqlkit.AlreadyExists(pe.Message, err)
		case pe.Code == stateInvalidPassword, pe.Code == stateInvalidAuthorization, pe.Code == stateInsufficientPrivs:
			return sqlkit.PermissionDenied(err)
		case pe.Code == stateUnknownDatabase:
			return runstate.InvalidArgument("dsn", "names a database that does not exist; create it first (%s)", pe.Message)
		case pe.Code == stateInvalidSchemaName:
			return runstate.InvalidArgument("schema", "%s", pe.Message)
		case pe.Code == stateDeadlock, pe.Code == stateSerialization:
			return sqlkit.ContentionPersisted(err)
		case pe.Code == stateTooManyConnections:
			return runstate.Unavailable("the server has no connection slot left; lower MaxOpenConns or raise max_connections", err)
		case pe.Code == stateAdminShutdown, pe.Code == stateCrashShutdown, pe.Code == stateCannotConnectNow,
			pe.Code == stateIdleInTxTimeout, len(pe.Code) == 5 && pe.Code[:2] == classConnectionException:
			return sqlkit.ConnectionLost("postgres", err)
		}
		return runstate.Unavailable("postgres error", err)
	case isConnectError(err):
		return runstate.Unavailable("cannot connect to the server", err)
	case errors.Is(err, pgconn.ErrConnClosed), pgconn.Timeout(err), sqlkit.ConnectionFailed(err):
		return sqlkit.ConnectionLost("postgres", err)
	}
	return runstate.Unavailable("postgres store failed", err)
}

// isConnectError reports a failure to connect, where nothing was sent.
func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// CreateRuns implements runstate.BatchCreator: every run, its labels and
// its created event in one transaction, all or none (BATCH-001).
func (s *Store) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.Store.Features().BatchCreator.CreateRuns(ctx, p)
}
