package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate"
)

var _ runstate.RunnableWatcher = (*Store)(nil)

// runnableChannel is the channel of LISTEN/NOTIFY on which writers with
// Options.NotifyRunnable announce runs that became runnable.
const runnableChannel = "runstate_runnable"

// WatchRunnable implements runstate.RunnableWatcher with LISTEN/NOTIFY, on a
// connection of its own, outside the pool: it hears the announcements of
// every handle of the same schema that has Options.NotifyRunnable. When
// that connection is lost it sends a value (a notice may have been missed
// meanwhile) and connects again, as long as ctx lasts.
func (s *Store) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	if err := s.runs.CheckOpen(); err != nil {
		return nil, err
	}
	conn, schema, err := s.listen(ctx)
	if err != nil {
		return nil, s.runs.OpenError(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopWithStore := context.AfterFunc(s.closing, cancel)
	wake := make(chan struct{}, 1)
	go func() {
		defer close(wake)
		defer stopWithStore()
		defer cancel()
		s.relay(ctx, conn, schema, wake)
	}()
	return wake, nil
}

// listen connects, listens on runnableChannel, and returns the connection
// with the schema whose announcements are this store's.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.conn.Copy())
	if err != nil {
		return nil, "", err
	}
	var schema string
	if err := conn.QueryRow(ctx, qCurrentSchema).Scan(&schema); err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	if _, err := conn.Exec(ctx, qListen); err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	return conn, schema, nil
}

// relay passes the announcements of schema on to wake until ctx ends,
// connecting again when the connection is lost.
func (s *Store) relay(ctx context.Context, conn *pgx.Conn, schema string, wake chan<- struct{}) {
	send := func() {
		select {
		case wake <- struct{}{}:
		default: // one is waiting already: they coalesce
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if ctx.Err() != nil {
			conn.Close(context.Background())
			return
		}
		if err == nil {
			if n.Payload == schema {
				send()
			}
			continue
		}
		conn.Close(context.Background())
		s.log.Warn("the connection that listens for runnable runs was lost; connecting again", "store", s.runs.Where(), "error", interpretError(err))
		send()
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			if conn, schema, err = s.listen(ctx); err == nil {
				send() // announcements made while away were lost
				break
			}
			if errors.Is(err, context.Canceled) {
				return
			}
		}
	}
}
