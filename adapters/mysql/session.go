package mysql

import (
	"context"
	sqldriver "database/sql/driver"
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
	execer, ok := conn.(sqldriver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("the MySQL driver's connection cannot execute statements")
	}
	if _, err := execer.ExecContext(ctx, qSessionReadCommitted, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
