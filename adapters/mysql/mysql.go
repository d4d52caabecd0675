// Package mysql is the shared-store reference adapter on MySQL 8 or
// MariaDB 10.6+ (InnoDB): several worker processes use one database,
// claims use SELECT … FOR UPDATE SKIP LOCKED, and every write is a
// compare-and-set on the version column, committed with its audit rows.
//
// Time comes from the database server (UTC_TIMESTAMP), one clock for every
// worker, so clock skew between workers cannot break leases.
package mysql

import (
	"cmp"
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
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
	// DSN in go-sql-driver/mysql form, naming the database:
	// user:password@tcp(host:3306)/runstate. It is never logged.
	DSN string
	// MaxOpenConns bounds the connection pool (default 32).
	MaxOpenConns int
	// GroupCommit configures how concurrent single writes share one
	// transaction (driver.GroupCommit). The zero value turns it on, with a
	// quarter of MaxOpenConns in flight at once; Off turns it off.
	GroupCommit driver.GroupCommit
	// StalledSessionTimeout is how long the server keeps a session that
	// sends nothing (default 10s, in whole seconds; the server's
	// wait_timeout). It ends such a session and rolls back its transaction:
	// a worker that stalls inside a transaction (a paused VM, SIGSTOP) holds
	// its row locks, and so blocks the takeover of its runs, no longer than
	// this. A wait_timeout in the DSN wins.
	StalledSessionTimeout time.Duration
	// ScratchDatabase makes the DSN's database a scratch one, for a
	// database per conformance check: Open creates it and Close drops it.
	// Open refuses a database that exists already, so that no existing
	// data can ever be dropped.
	ScratchDatabase bool
	// CreateDatabase has Open create the DSN's database when it does not
	// exist, and keep it: a database a process creates and the next one
	// opens again, as a certification that kills and relaunches a plugin
	// needs. It never drops anything. It does not go with ScratchDatabase.
	CreateDatabase bool
	// Logger receives the adapter's messages; defaults to slog.Default().
	Logger *slog.Logger
	// Clock, when set, replaces the database clock. Tests use it to move time
	// without sleeping; production leaves it nil, and the database server's
	// clock decides. The SQL is the same either way: the time is a bound
	// parameter that is NULL in production.
	Clock runstate.Clock
}

// Store is a runstate store in a MySQL database.
type Store struct {
	driver.Store
	runs *sqlkit.Driver
	// scratch is the server (no database) of a database Open created, which
	// Close drops; nil otherwise.
	scratch *gomysql.Config
	dbName  string
}

// driverLogger takes the driver's own lines (a connection found cut, a
// packet that could not be read) to the store's logger at debug level,
// instead of the process's stderr: the error a call returns says what
// matters to its caller.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) {
	log := l.log
	if log == nil {
		log = slog.Default()
	}
	log.Debug("mysql driver: " + strings.TrimSpace(fmt.Sprintln(v...)))
}

// Open connects to the database named by opts.DSN, checks it answers and
// applies the embedded migrations. A malformed DSN is ErrInvalidArgument,
// a server that cannot be reached ErrUnavailable, refused credentials
// ErrPermissionDenied.
func Open(ctx context.Context, opts Options) (*Store, error) { return open(ctx, opts, nil) }

// open is Open, with the connector wrapped by wrap when set (a test's
// counting of statements and commits).
func open(ctx context.Context, opts Options, wrap func(sqldriver.Connector) sqldriver.Connector) (*Store, error) {
	cfg, err := gomysql.ParseDSN(opts.DSN)
	if err != nil {
		return nil, runstate.InvalidArgument("dsn", "%v (expected user:password@tcp(host:3306)/database)", err)
	}
	if cfg.DBName == "" {
		return nil, runstate.InvalidArgument("dsn", "names no database; add it after the slash: user:password@tcp(host:3306)/runstate")
	}
	cfg.ParseTime, cfg.Loc = true, time.UTC
	cfg.InterpolateParams = true // one round trip per statement; the driver escapes every value
	// An UPDATE's rows affected are the rows it matched, changed or not,
	// so that a batch's checked UPDATE can tell that it matched each row.
	cfg.ClientFoundRows = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second // a server that is down fails fast
	}
	stalled := opts.StalledSessionTimeout
	if stalled <= 0 {
		stalled = 10 * time.Second
	}
	stalled = max(time.Second, stalled.Round(time.Second))
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, set := cfg.Params["wait_timeout"]; !set {
		cfg.Params["wait_timeout"] = strconv.Itoa(int(stalled / time.Second))
	}
	cfg.Logger = driverLogger{opts.Logger}
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, runstate.InvalidArgument("dsn", "%v", err)
	}
	var wrapped sqldriver.Connector = readCommittedConnector{connector}
	if wrap != nil {
		wrapped = wrap(wrapped)
	}
	db := sqlx.NewDb(sql.OpenDB(wrapped), "mysql")
	s := &Store{runs: sqlkit.New(sqlkit.Params{DB: db, Dialect: dialect, Clock: opts.Clock,
		Where: fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)}), dbName: cfg.DBName}
	if opts.ScratchDatabase && opts.CreateDatabase {
		db.Close()
		return nil, runstate.InvalidArgument("scratch_database", "and create_database both set: a scratch database must not exist and is dropped at Close, one created when missing is kept; choose one")
	}
	if opts.CreateDatabase {
		server := cfg.Clone()
		server.DBName = ""
		if err := onServer(ctx, server, qCreateDatabaseIfMissing+quoteName(cfg.DBName)); err != nil {
			db.Close()
			return nil, s.runs.OpenError(err)
		}
	}
	if opts.ScratchDatabase {
		server := cfg.Clone()
		server.DBName = ""
		if err := onServer(ctx, server, qCreateDatabase+quoteName(cfg.DBName)); err != nil {
			db.Close()
			if isErrorNumber(err, errDatabaseExists) {
				return nil, runstate.InvalidArgument("dsn", "names database %s, which exists: a scratch database is created by Open and dropped by Close, "+
					"so it must not exist beforehand (name a new one, e.g. runs_{{unique}} with conformance-runner)", cfg.DBName)
			}
			return nil, s.runs.OpenError(err)
		}
		s.scratch = server
	}
	sqlkit.ConfigurePool(db, opts.MaxOpenConns)
	db.SetConnMaxIdleTime(stalled / 2) // retired before the server ends it
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(s.runs.OpenError(err), s.Close())
	}
	if err := migrate(ctx, db); err != nil {
		return nil, errors.Join(s.runs.OpenError(err), s.Close())
	}
	s.Store = driver.WrapWith(s.runs, driver.WrapOptions{GroupCommit: sqlkit.GroupCommit(opts.GroupCommit, opts.MaxOpenConns), Logger: cmp.Or(opts.Logger, slog.Default())})
	return s, nil
}

// Close closes the connection pool, and drops the database if Open created
// it (Options.ScratchDatabase); later calls return runstate.ErrUnavailable.
func (s *Store) Close() error {
	if !s.runs.MarkClosed() {
		return nil
	}
	err := interpretError(s.runs.DB().Close())
	if s.scratch != nil {
		// A plugin host allows its plugin 2 s to stop: the drop is one statement.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if dropErr := onServer(ctx, s.scratch, qDropDatabase+quoteName(s.dbName)); dropErr != nil {
			err = errors.Join(err, runstate.Unavailable(fmt.Sprintf("the scratch database %s of %s was not dropped; drop it by hand", s.dbName, s.runs.Where()), dropErr))
		}
	}
	return err
}

// onServer runs one statement on a connection of its own, outside the
// store's database.
func onServer(ctx context.Context, server *gomysql.Config, stmt string) error {
	connector, err := gomysql.NewConnector(server)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// quoteName quotes an identifier for MySQL.
func quoteName(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// MySQL error numbers the adapter interprets.
const (
	errDupEntry        = 1062
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errAccessDenied    = 1045
	errAccessNoPass    = 1698
	errDBAccessDenied  = 1044
	errTableDenied     = 1142
	errColumnDenied    = 1143
	errRoutineDenied   = 1370 // EXECUTE or ALTER ROUTINE on a procedure of migration 002
	errUnknownDatabase = 1049
	errDatabaseExists  = 1007
	errServerShutdown  = 1053
	errInterrupted     = 1317
	errConnKilled      = 1927 // MariaDB: KILL CONNECTION from another session
)

// retryable is the dialect's Retryable: InnoDB rolled back the
// transaction (a deadlock) or the statement (a lock wait timeout).
func retryable(err error) bool {
	return isErrorNumber(err, errDeadlock) || isErrorNumber(err, errLockWaitTimeout)
}

// interpretError is the dialect's Interpret: the server's error numbers
// and the driver's lost connections (a session killed, a server shut
// down) to the contract's codes. Every statement carries the caller's
// context, whose deadline the driver honours on a slow link (FAULT-007).
func interpretError(err error) error {
	var me *gomysql.MySQLError
	switch {
	case sqlkit.Passes(err):
		return err
	case errors.As(err, &me):
		switch me.Number {
		case errDupEntry:
			return sqlkit.AlreadyExists(me.Message, err)
		case errAccessDenied, errAccessNoPass, errDBAccessDenied, errTableDenied, errColumnDenied, errRoutineDenied:
			return sqlkit.PermissionDenied(err)
		case errUnknownDatabase:
			return runstate.InvalidArgument("dsn", "names a database that does not exist; create it first (%s)", me.Message)
		case errDeadlock, errLockWaitTimeout:
			return sqlkit.ContentionPersisted(err)
		case errServerShutdown, errInterrupted, errConnKilled:
			return sqlkit.ConnectionLost("mysql", err)
		}
		return runstate.Unavailable("mysql error", err)
	case errors.Is(err, gomysql.ErrInvalidConn), sqlkit.ConnectionFailed(err):
		return sqlkit.ConnectionLost("mysql", err)
	}
	return runstate.Unavailable("mysql store failed", err)
}

// isErrorNumber reports a server error of number.
func isErrorNumber(err error, number uint16) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// CreateRuns implements runstate.BatchCreator: every run, its labels and
// its created event in one transaction, all or none (BATCH-001).
func (s *Store) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.Store.Features().BatchCreator.CreateRuns(ctx, p)
}
