package benchutil

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
)

// Counter counts what a database/sql pool sends through the connectors it
// wraps: statements (each Exec or Query on a connection) and commits, so
// that a test can tell how many round trips and transactions a call costs.
type Counter struct {
	statements, commits atomic.Int64
}

// Statements is how many statements were sent, BEGIN and COMMIT aside.
func (c *Counter) Statements() int64 { return c.statements.Load() }

// Commits is how many transactions were committed.
func (c *Counter) Commits() int64 { return c.commits.Load() }

// Wrap returns inner, counting on c.
func (c *Counter) Wrap(inner driver.Connector) driver.Connector { return countingConnector{inner, c} }

type countingConnector struct {
	driver.Connector
	counter *Counter
}

func (cc countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := cc.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, cc.counter}, nil
}

// countingConn passes every interface database/sql uses to the driver's
// connection, counting statements and commits on the way.
type countingConn struct {
	driver.Conn
	counter *Counter
}

func (c countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("benchutil: the driver's connection has no BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, c.counter}, nil
}

func (c countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.counter.statements.Add(1)
	return e.ExecContext(ctx, query, args)
}

func (c countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.counter.statements.Add(1)
	return q.QueryContext(ctx, query, args)
}

func (c countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c countingConn) CheckNamedValue(v *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c countingConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type countingTx struct {
	driver.Tx
	counter *Counter
}

func (t countingTx) Commit() error {
	err := t.Tx.Commit()
	if err == nil {
		t.counter.commits.Add(1)
	}
	return err
}
