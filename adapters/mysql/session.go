package mysql

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
)

// readCommittedConnector opens connections whose transactions are READ
// COMMITTED unless told otherwise. database/sql sets a transaction's
// isolation with a statement of its own before every BEGIN: set once per
// connection, it saves every transaction a round trip.
type readCommittedConnector struct{ sqldriver.Connector }

func (c readCommittedConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	dc, ok := conn.(driverConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("the MySQL driver's connection (%T) lacks an interface database/sql uses", conn)
	}
	if _, err := dc.ExecContext(ctx, qSessionReadCommitted, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return boundConn{dc}, nil
}

// driverConn is what database/sql uses of the driver's connection.
type driverConn interface {
	sqldriver.Conn
	sqldriver.ConnBeginTx
	sqldriver.ConnPrepareContext
	sqldriver.ExecerContext
	sqldriver.QueryerContext
	sqldriver.Pinger
	sqldriver.SessionResetter
	sqldriver.Validator
	sqldriver.NamedValueChecker
}

// boundConn ends its transactions within the context they began with.
// database/sql's Tx.Commit and Rollback take no context, and the driver's
// COMMIT would wait for an unreachable server as long as the network
// holds the connection: a write during a partition returned success
// seconds after its deadline. The driver bounds statements by their
// context, so COMMIT and ROLLBACK are sent as statements (FAULT-001).
type boundConn struct{ driverConn }

func (c boundConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	if _, err := c.driverConn.BeginTx(ctx, opts); err != nil {
		return nil, err
	}
	return boundTx{conn: c.driverConn, ctx: ctx}, nil
}

// boundTx is a transaction that ends within its context. The driver's own
// transaction object is dropped: it holds nothing but the connection.
type boundTx struct {
	conn driverConn
	ctx  context.Context
}

func (t boundTx) Commit() error {
	if _, err := t.conn.ExecContext(t.ctx, "COMMIT", nil); err != nil {
		// The COMMIT may never have been sent (the context had ended): the
		// connection must not go back to the pool with its transaction open.
		return errors.Join(sqldriver.ErrBadConn, err)
	}
	return nil
}

func (t boundTx) Rollback() error {
	if t.ctx.Err() != nil {
		// Nothing can be sent: the pool closes the connection, and the
		// server rolls back what it held.
		return sqldriver.ErrBadConn
	}
	if _, err := t.conn.ExecContext(t.ctx, "ROLLBACK", nil); err != nil {
		return sqldriver.ErrBadConn
	}
	return nil
}
