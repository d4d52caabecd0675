package sqlkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

var (
	_ driver.Driver      = (*Driver)(nil)
	_ driver.NextClaimer = (*Driver)(nil)
	_ driver.LeaseReader = (*Driver)(nil)
)

// Driver is a driver.Driver (with driver.NextClaimer and
// driver.LeaseReader) on a SQL database, speaking a Dialect.
type Driver struct {
	db      *sqlx.DB
	dialect Dialect
	sql     *Statements    // the dialect's
	clock   runstate.Clock // nil: the database clock
	where   string         // user@address/database…, for messages
	closed  atomic.Bool
	// known are the rows this handle wrote last (lean writes only), and
	// dbClock its estimate of the database's time (known.go).
	known   *knownRows
	dbClock serverClock
	// claims are the runs the handle's lean claims are writing (lean.go).
	claims claimHolds
	// writes is the way the handle writes, chosen in New.
	writes writeWay
}

// Params configure New.
type Params struct {
	// DB is the connection pool, whose transactions are READ COMMITTED.
	DB      *sqlx.DB
	Dialect Dialect
	// Clock, when set, replaces the database clock: it is bound into every
	// clock expression, which takes the database's own clock for NULL.
	Clock runstate.Clock
	// Where names the database in messages, never with a password.
	Where string
}

// New returns a Driver on p.DB.
func New(p Params) *Driver {
	k := &Driver{db: p.DB, dialect: p.Dialect, clock: p.Clock, where: p.Where}
	k.sql = &k.dialect.Statements
	k.writes = lockingWay{k}
	if k.sql.Lean.WriteRuns != "" { // the dialect writes the lean way
		k.known = new(knownRows)
		k.writes = leanWay{lockingWay{k}}
	}
	return k
}

// writeWay is how a Driver writes runs: the lean way (lean.go) where the
// dialect has lean statements, else the locking way. New chooses it once;
// its methods are what the two ways do differently.
type writeWay interface {
	insert(ctx context.Context, r driver.InsertParams) error
	insertMany(ctx context.Context, runs []driver.InsertParams) error
	modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error
	modifyMany(ctx context.Context, items []driver.ModifyItem) error
	claimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error)
	claimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error)
	// estimatedNow is the database's time from a recent reading of its
	// clock (serverClock), where the way lets Now answer without a round
	// trip.
	estimatedNow() (time.Time, bool)
}

// lockingWay writes in a transaction of several statements, which locks
// the rows it changes (SELECT … FOR UPDATE) before it decides on them. It
// embeds the Driver, whose helpers its methods use.
type lockingWay struct{ *Driver }

// estimatedNow: the locking way's Now always reads the database's clock.
func (lockingWay) estimatedNow() (time.Time, bool) { return time.Time{}, false }

// DB is the connection pool.
func (k *Driver) DB() *sqlx.DB { return k.db }

// Where names the database in messages.
func (k *Driver) Where() string { return k.where }

// MarkClosed makes later calls ErrUnavailable and reports whether the
// driver was open, so that a store's Close releases what it holds once.
func (k *Driver) MarkClosed() (wasOpen bool) { return !k.closed.Swap(true) }

// CheckOpen reports the store closed (ErrUnavailable) before anything runs.
func (k *Driver) CheckOpen() error {
	if k.closed.Load() {
		return runstate.Unavailable(k.dialect.Name+" store "+k.where+" is closed", nil)
	}
	return nil
}

// OpenError interprets an error of opening the store; a message other
// than a refused argument's names the engine and the database.
func (k *Driver) OpenError(err error) error {
	err = k.dialect.Interpret(err)
	var se *runstate.Error
	if errors.As(err, &se) && se.Code != runstate.CodeInvalidArgument {
		se.Message = fmt.Sprintf("%s %s: %s", k.dialect.Name, k.where, se.Message)
	}
	return err
}

// clockParam is the time bound into every clock expression: NULL, for the
// database's own clock, unless a Clock is set.
func (k *Driver) clockParam() any {
	if k.clock == nil {
		return nil
	}
	return driver.Timestamp(k.clock.Now())
}

// MaxRetries bounds the retries of a transaction Dialect.Retryable admits.
const MaxRetries = 8

// InTx runs fn in a transaction at the connection's isolation level (READ
// COMMITTED for both engines) and commits it when fn returns nil.
// Retryable errors are retried up to MaxRetries times with a short random
// pause; a lost connection is not (the commit may have happened): the
// snapshot, its audit events and the lease of a write change in one
// transaction, so a write cut off by a fault is applied wholly or not at
// all, never twice (FAULT-004, FAULT-005; across a failover FAULT-010,
// FAULT-011), and it is acknowledged only once committed (FAULT-003).
// Errors come back interpreted.
func (k *Driver) InTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return k.retried(ctx, func() error { return k.try(ctx, fn) })
}

// retried runs write, a transaction or a statement committed alone, again
// while Dialect.Retryable says the server rolled it back, up to MaxRetries
// times with a short random pause, and returns its error interpreted.
func (k *Driver) retried(ctx context.Context, write func() error) error {
	if err := k.CheckOpen(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil { // CTX-001
			return err
		}
		err := write()
		if !k.dialect.Retryable(err) || attempt == MaxRetries {
			return k.dialect.Interpret(err)
		}
		time.Sleep(time.Duration(rand.IntN(1000*(min(attempt, 6)+1))) * time.Microsecond)
	}
}

func (k *Driver) try(ctx context.Context, fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := k.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Keeps implements driver.Keeper: the run's row carries its wake time and
// queue, and the claim searches read the parked queue by wake time.
func (k *Driver) Keeps() driver.Keeps { return driver.Keeps{Parking: true} }

// Now implements driver.Driver: the database server's time, unless a
// Clock replaces it. Where the dialect writes the lean way, a time that a
// statement read there less than a second ago, plus the time elapsed here
// since, answers without a round trip (serverClock): not ahead of the
// database's own, and never earlier than an answer before it.
func (k *Driver) Now(ctx context.Context) (time.Time, error) {
	if err := k.CheckOpen(); err != nil {
		return time.Time{}, err
	}
	if k.clock != nil {
		return driver.Timestamp(k.clock.Now()), nil
	}
	if now, ok := k.writes.estimatedNow(); ok {
		return now, nil
	}
	var now time.Time
	if err := k.db.GetContext(ctx, &now, k.sql.Now, nil); err != nil {
		return time.Time{}, k.dialect.Interpret(err)
	}
	now = driver.Timestamp(now)
	k.dbClock.observe(now, time.Now())
	k.dbClock.given(now)
	return now, nil
}

// GetLease implements driver.LeaseReader: a plain read, no row lock.
func (k *Driver) GetLease(ctx context.Context, runID string) (driver.LeaseState, error) {
	var r row
	if err := k.readRun(ctx, &r, k.sql.GetLease, runID); err != nil {
		return driver.LeaseState{}, err
	}
	return r.lease(), nil
}

// Get implements driver.Driver.
func (k *Driver) Get(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	var snap string
	if err := k.readRun(ctx, &snap, k.sql.GetRun, runID); err != nil {
		return runstate.RunSnapshot{}, err
	}
	return decodeRun(snap)
}

// readRun reads a run's row into dest with query (run_id), outside a
// transaction; ErrNotFound when it is missing.
func (k *Driver) readRun(ctx context.Context, dest any, query, runID string) error {
	if err := k.CheckOpen(); err != nil {
		return err
	}
	err := k.db.GetContext(ctx, dest, query, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return runstate.ErrNotFound
	}
	return k.dialect.Interpret(err)
}

// lockRun reads and locks a run for a write; ErrNotFound when it is
// missing (RUN-004).
func (k *Driver) lockRun(ctx context.Context, tx *sqlx.Tx, id string) (row, error) {
	k.known.forget(id)
	var r row
	err := tx.GetContext(ctx, &r, k.sql.LockRun, k.clockParam(), id)
	if errors.Is(err, sql.ErrNoRows) {
		return r, runstate.ErrNotFound
	}
	return r, err
}
