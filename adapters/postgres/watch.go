package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
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

// Features implements runstate.RunStateStore: the kit's, with batch
// creates and the watches of LISTEN/NOTIFY.
func (s *Store) Features() runstate.Features { return runstate.FeaturesOf(s) }

// WatchRunnable implements runstate.RunnableWatcher with LISTEN/NOTIFY, on a
// connection of its own, outside the pool: it hears the announcements of
// every handle of the same schema that has Options.NotifyRunnable. It
// also wakes when a parked run comes due, which no write announces
// (ringDue). When
// that connection is lost it sends a value (a notice may have been missed
// meanwhile) and connects again, as long as ctx lasts.
func (s *Store) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	if err := s.runs.CheckOpen(); err != nil {
		return nil, err
	}
	conn, schema, err := s.listen(ctx, runnableChannel)
	if err != nil {
		return nil, s.runs.OpenError(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopWithStore := context.AfterFunc(s.closing, cancel)
	wake := make(chan struct{}, 1)
	send := func() {
		select {
		case wake <- struct{}{}:
		default: // one is waiting already: they coalesce
		}
	}
	ringing := make(chan struct{})
	go func() { defer close(ringing); s.ringDue(ctx, send) }()
	go func() {
		defer close(wake)
		defer stopWithStore()
		defer func() { cancel(); <-ringing }() // no send after the close
		s.relay(ctx, conn, schema, listening{channel: runnableChannel, what: "runnable runs", lost: send,
			notice: func(schema, payload string) {
				if payload == schema {
					send()
				}
			}})
	}()
	return wake, nil
}

// dueRecheck bounds how long a watch of runnable runs goes without
// reading the parked index afresh: a run parked since by another process
// is announced at its time once a read has seen it.
const dueRecheck = 5 * time.Second

// ringDue sends when a parked run comes due, which no write announces,
// until ctx ends. It reads from the parked index how long, in the
// database's time, until the earliest wake time to come, and whether a
// run parked meanwhile (by any process) came due since its last read;
// it sends for the latter, waits until the former (at most dueRecheck),
// and reads again. A failed read is tried again after dueRecheck: the
// watchers poll meanwhile.
func (s *Store) ringDue(ctx context.Context, send func()) {
	var last time.Time // of the last read, in the database's time
	for {
		var until sql.NullFloat64
		var cameDue bool
		var at time.Time
		err := s.runs.DB().QueryRowContext(ctx, qParkedNews, nullTime(last)).Scan(&until, &cameDue, &at)
		wait := dueRecheck
		if err == nil {
			last = at
			if cameDue {
				send()
			}
			if d := time.Duration(until.Float64 * float64(time.Second)); until.Valid && d < wait {
				wait = max(d, 0)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// nullTime is t for a statement, NULL when zero: the first read of the
// parked index has no last read, and no run came due since.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// WatchRun implements runstate.RunWatcher with LISTEN/NOTIFY: it hears the
// writes of the run by every handle of the same schema that has
// Options.NotifyRuns (WATCH-001), until ctx ends (WATCH-002). The store's
// watches of runs share one connection, outside the pool, made by the
// first and kept until the store closes: a console with many open pages
// holds one. When it is lost, every watch wakes (a notice may have been
// missed) and it connects again.
func (s *Store) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	if err := driver.ValidateWatchRun(p); err != nil {
		return nil, err
	}
	if err := s.runs.CheckOpen(); err != nil {
		return nil, err
	}
	if err := s.listenForRuns(ctx); err != nil {
		return nil, err
	}
	return s.runNotices.WatchRun(ctx, p)
}

// listenForRuns starts the connection that hears the writes of runs for
// every WatchRun, unless it runs already.
func (s *Store) listenForRuns(ctx context.Context) error {
	s.runListener.Lock()
	defer s.runListener.Unlock()
	if s.runListener.started {
		return nil
	}
	conn, schema, err := s.listen(ctx, runChannel)
	if err != nil {
		return s.runs.OpenError(err)
	}
	s.runListener.started = true
	go func() {
		defer s.runNotices.Close()
		s.relay(s.closing, conn, schema, listening{channel: runChannel, what: "the writes of runs", lost: s.runNotices.NotifyAll,
			notice: func(schema, payload string) {
				if where, runID, ok := strings.Cut(payload, " "); ok && where == schema {
					s.runNotices.Notify(runID)
				}
			}})
	}()
	return nil
}

// listening is what a relay listens to.
type listening struct {
	channel string
	// notice takes a notice's payload, in the store's schema.
	notice func(schema, payload string)
	// lost is called when notices may have been missed.
	lost func()
	// what names the watch in the log.
	what string
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

// relay passes the announcements on l's channel to l until ctx ends,
// connecting again when the connection is lost.
func (s *Store) relay(ctx context.Context, conn *pgx.Conn, schema string, l listening) {
	for {
		n, err := conn.WaitForNotification(ctx)
		if ctx.Err() != nil {
			conn.Close(context.Background())
			return
		}
		if err == nil {
			l.notice(schema, n.Payload)
			continue
		}
		conn.Close(context.Background())
		s.log.Warn("the connection that listens for "+l.what+" was lost; connecting again", "store", s.runs.Where(), "error", interpretError(err))
		l.lost()
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			if conn, schema, err = s.listen(ctx, l.channel); err == nil {
				l.lost() // announcements made while away were lost
				break
			}
			if errors.Is(err, context.Canceled) {
				return
			}
		}
	}
}
