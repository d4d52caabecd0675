package sqlkit

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
)

// What each dialect's Interpret shares. Each engine classifies its own
// errors in one function; these are the cases every engine has alike.

// Passes reports an error Interpret returns as it is: none, one that is
// already the contract's, or a context's.
func Passes(err error) bool {
	return err == nil || runstate.CodeOf(err) != "" || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ConnectionFailed reports a connection found broken or cut, by
// database/sql or the network: the server cannot be reached, was
// restarted or cut the connection (FAULT-001, FAULT-002). database/sql
// drops such connections, so the pool works again once the server
// answers, without reopening the store (FAULT-006); after a failover its
// new connections reach the promoted primary by the hosts the DSN names
// (FAULT-012).
func ConnectionFailed(err error) bool {
	var ne net.Error
	return errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &ne) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone)
}

// ConnectionLost is the UNAVAILABLE of a connection that failed or was
// lost mid-call, to the server of engine name.
func ConnectionLost(name string, err error) error {
	return runstate.Unavailable("connection to the "+name+" server failed or was lost; re-read before retrying, the call may or may not have committed", err)
}

// AlreadyExists is a duplicate key: a run that exists.
func AlreadyExists(message string, err error) error {
	return &runstate.Error{Code: runstate.CodeAlreadyExists, Message: message, Cause: err}
}

// PermissionDenied is a server's refusal of the DSN's credentials or grants.
func PermissionDenied(err error) error {
	return &runstate.Error{Code: runstate.CodePermissionDenied, Message: "access denied: check the DSN's user, password and grants", Cause: err}
}

// ContentionPersisted is a deadlock or lock wait still failing after
// MaxRetries.
func ContentionPersisted(err error) error {
	return runstate.Unavailable(fmt.Sprintf("lock contention persisted through %d retries; try again", MaxRetries), err)
}

// ConfigurePool bounds db's pool to maxOpen connections (32 when not
// positive), all kept idle between calls, each retired after 30 minutes.
func ConfigurePool(db *sqlx.DB, maxOpen int) {
	maxOpen = poolSize(maxOpen)
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	db.SetConnMaxLifetime(30 * time.Minute)
}
