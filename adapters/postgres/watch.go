package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

var (
	_ runstate.RunnableWatcher = (*Store)(nil)
	_ runstate.RunWatcher      = (*Store)(nil)
)

// runnableChannel is the channel of LISTEN/NOTIFY on which writers with
// Options.NotifyRunnable announce runs that became runnable.
const runnableChannel = "runstate_runnable"

// runChannel is the channel on which writers with Options.NotifyRuns
// announce each write of a run (migration 003's trigger).
const runChannel = "runstate_run"

// notifyRunsSetting is the session setting that turns migration 003's
// trigger on (Options.NotifyRuns).
const notifyRunsSetting = "runstate.notify_runs"

// WatchRunnable implements runstate.RunnableWatcher with LISTEN/NOTIFY, on a
// connection of its own, outside the pool: it hears the announcements of
// every handle of the same schema that has Options.NotifyRunnable. When
// that connection is lost it sends a value (a notice may have been missed
// meanwhile) and connects again, as long as ctx lasts.
func (s *Store) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	return s.watch(ctx, listening{channel: runnableChannel, what: "runnable runs",
		wakes: func(schema, payload string) bool { return payload == schema }})
}

// WatchRun implements runstate.RunWatcher as WatchRunnable does, on a
// connection of its own: it hears the writes of the run by every handle
// of the same schema that has Options.NotifyRuns (WATCH-001), until ctx
// ends (WATCH-002).
func (s *Store) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	if err := driver.ValidateWatchRun(p); err != nil {
		return nil, err
	}
	return s.watch(ctx, listening{channel: runChannel, what: "run " + p.RunID,
		wakes: func(schema, payload string) bool { return payload == schema+" "+p.RunID }})
}

// listening is what a watch listens to.
type listening struct {
	channel string
	// wakes reports whether a notice's payload is for the watch, in the
	// store's schema.
	wakes func(schema, payload string) bool
	// what names the watch in the log.
	what string
}

// watch is the body of both watches: a connection that listens to l's
// channel, relaying its notices until ctx ends or the store closes.
func (s *Store) watch(ctx context.Context, l listening) (<-chan struct{}, error) {
	if err := s.runs.CheckOpen(); err != nil {
		return nil, err
	}
	conn, schema, err := s.listen(ctx, l.channel)
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
		s.relay(ctx, conn, schema, l, wake)
	}()
	return wake, nil
}

// listen connects, listens on channel, and returns the connection with
// the schema whose announcements are this store's.
func (s *Store) listen(ctx context.Context, channel string) (*pgx.Conn, string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.conn.Copy())
	if err != nil {
		return nil, "", err
	}
	var schema string
	if err := conn.QueryRow(ctx, qCurrentSchema).Scan(&schema); err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	if _, err := conn.Exec(ctx, qListen+channel); err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	return conn, schema, nil
}

// relay passes l's announcements of schema on to wake until ctx ends,
// connecting again when the connection is lost.
func (s *Store) relay(ctx context.Context, conn *pgx.Conn, schema string, l listening, wake chan<- struct{}) {
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
			if l.wakes(schema, n.Payload) {
				send()
			}
			continue
		}
		conn.Close(context.Background())
		s.log.Warn("the connection that listens for "+l.what+" was lost; connecting again", "store", s.runs.Where(), "error", interpretError(err))
		send()
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			if conn, schema, err = s.listen(ctx, l.channel); err == nil {
				send() // announcements made while away were lost
				break
			}
			if errors.Is(err, context.Canceled) {
				return
			}
		}
	}
}
