package sqlkit

import (
	"database/sql"
	"sync"
	"time"

	"github.com/runstate/runstate/driver"
)

// Known rows (lean writes): a handle keeps each row it has just written,
// as the database now holds it, with the row's new version, so that the
// next write of that run decides on it without reading it again: a worker
// that claims a run and then completes it sends one statement for the
// completion, not a read and a write.
//
// It is a guess that the write checks, never a read answered from memory:
// WriteRuns writes a row only where its version is still the one known,
// and another writer's write (another handle, another process, the
// locking way) changes the version, so a row written meanwhile is not
// written; it is then read and decided again, as a row lost between a
// read and a write is. A decision that writes nothing (a refusal, a write
// that changes nothing) has no statement to check it, so it is never
// answered from a known row: it is decided again on the row as read.
// Reads (GetRun, listings, claim searches) never use known rows.
//
// The time of a decision on a known row is the database's, estimated: the
// database time its write returned, plus the time elapsed here since its
// answer arrived, less a thousandth of it (serverClock.discount). The
// answer left the server after the time was taken, and a thousandth is
// more than a clock disciplined by NTP drifts (at most 500 ppm), so the
// estimate is not later than the database's time at the decision, and
// never earlier than the row's own stamps; WriteRuns refuses a known row
// whose estimate is ahead of the database's time at the write all the
// same (a clock here that runs faster still), which then goes the reading
// way. Decided on the row as committed and on a database time no later
// than now, a write is decided as the reading way decides it.

const (
	// knownRowsMax and knownBytesMax bound the rows a handle keeps and
	// their snapshots' bytes; when a row would pass either, the rows older
	// than half of knownRowAge go, or all of them. A worker needs one per
	// run it holds.
	knownRowsMax  = 4096
	knownBytesMax = 16 << 20
	// knownSnapshotMax is the largest snapshot kept: a larger run is read.
	knownSnapshotMax = 256 << 10
	// knownRowAge bounds how long a row is kept: a run written again
	// later is read, so that an estimate of the time is made over short
	// spans only. Rows that old are swept at most once per knownRowAge.
	knownRowAge = time.Second
)

// knownRow is a row as this handle wrote it, and when.
type knownRow struct {
	row row
	// dbTime is the database's time in the write's statement; seen is when
	// its answer arrived here (with a monotonic reading).
	dbTime, seen time.Time
}

// knownRows are the rows a handle wrote last, by run_id. The zero value is
// empty and ready; a nil *knownRows keeps nothing.
type knownRows struct {
	mu    sync.Mutex
	rows  map[string]knownRow
	bytes int       // of the kept snapshots
	swept time.Time // the last sweep of old rows
}

// take removes and returns the row of runID as known, with its estimated
// database time, if it was written less than knownRowAge ago.
func (k *knownRows) take(runID string, now time.Time) (row, bool) {
	if k == nil {
		return row{}, false
	}
	k.mu.Lock()
	kr, ok := k.rows[runID]
	if ok {
		k.drop(runID)
	}
	k.mu.Unlock()
	age := now.Sub(kr.seen)
	if !ok || age >= knownRowAge || age < 0 {
		return row{}, false
	}
	r := kr.row
	r.Now = driver.Timestamp(kr.dbTime.Add(discount(age)))
	return r, true
}

// put keeps rows, written by a statement whose database time was dbTime
// and whose answer arrived at seen.
func (k *knownRows) put(rows []row, dbTime, seen time.Time) {
	if k == nil || len(rows) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rows == nil {
		k.rows = make(map[string]knownRow)
	}
	if seen.Sub(k.swept) >= knownRowAge {
		k.evict(seen, knownRowAge)
		k.swept = seen
	}
	for _, r := range rows {
		k.drop(r.RunID)
		if len(r.Snapshot) > knownSnapshotMax {
			continue
		}
		if len(k.rows) >= knownRowsMax || k.bytes+len(r.Snapshot) > knownBytesMax {
			k.evict(seen, knownRowAge/2)
		}
		k.rows[r.RunID] = knownRow{row: r, dbTime: dbTime, seen: seen}
		k.bytes += len(r.Snapshot)
	}
}

// drop removes the row of runID, if kept.
func (k *knownRows) drop(runID string) {
	if kr, ok := k.rows[runID]; ok {
		k.bytes -= len(kr.row.Snapshot)
		delete(k.rows, runID)
	}
}

// evict drops the rows kept for age or longer; when that frees nothing
// (age below knownRowAge: room is needed), every row goes, so that the
// bounds hold whatever the pattern of writes.
func (k *knownRows) evict(now time.Time, age time.Duration) {
	before := len(k.rows)
	for id, kr := range k.rows {
		if now.Sub(kr.seen) >= age {
			k.drop(id)
		}
	}
	if len(k.rows) == before && age < knownRowAge {
		clear(k.rows)
		k.bytes = 0
	}
}

// forget drops what is known of ids: the locking way is about to write
// them, and what it writes is not kept.
func (k *knownRows) forget(ids ...string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	for _, id := range ids {
		k.drop(id)
	}
	k.mu.Unlock()
}

// forgetAll drops every row kept: a statement failed, perhaps with the
// connection, and the server answering next may not be the one that
// wrote them (a failover).
func (k *knownRows) forgetAll() {
	if k == nil {
		return
	}
	k.mu.Lock()
	clear(k.rows)
	k.bytes = 0
	k.mu.Unlock()
}

// len is the number of rows kept.
func (k *knownRows) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.rows)
}

// shift moves the database time of every row kept by d: tests make an
// estimate run ahead of the database with it.
func (k *knownRows) shift(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, kr := range k.rows {
		kr.dbTime = kr.dbTime.Add(d)
		k.rows[id] = kr
	}
}

// ShiftKnownTimes moves the database time of every row the handle keeps
// by d, so that a test can make the estimate of a known row's time run
// ahead of the database's, as a fast clock here would.
func (k *Driver) ShiftKnownTimes(d time.Duration) {
	if k.known != nil {
		k.known.shift(d)
	}
}

// discount is elapsed, time measured here, less a thousandth: at most what
// elapsed on a database clock that runs up to 1000 ppm slower than this
// one.
func discount(elapsed time.Duration) time.Duration { return elapsed - elapsed/1000 }

// knownAfter is w's row as its lean write leaves it, at rowVersion:
// snapshot is the snapshot written ("" when the write kept the one read).
func knownAfter(w rowWrite, snapshot string, rowVersion int64) row {
	if snapshot == "" {
		snapshot = w.locked.Snapshot
	}
	return row{RunID: w.locked.RunID, Version: w.next.Version, LastSeq: w.lastSeq, Snapshot: snapshot,
		LeaseToken: w.lease.Token, LeaseWorker: w.lease.Owner.Worker, LeaseIncarnation: w.lease.Owner.Incarnation,
		LeaseAcquiredAt: storedTime(w.lease.AcquiredAt), LeaseExpiresAt: storedTime(w.lease.ExpiresAt),
		LeaseReleased: w.lease.Released, RowVersion: rowVersion}
}

// storedTime is t as a timestamp column holds it and gives back: to the
// microsecond, in UTC, NULL for the zero time.
func storedTime(t time.Time) sql.NullTime {
	if t.IsZero() {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: driver.Timestamp(t), Valid: true}
}

// serverClock estimates the database's time from its last reading: the
// time a statement read there, plus the time elapsed here since its
// answer arrived, less a thousandth (discount). It is not ahead of the
// database (the answer left the server after the reading), it does not go
// back (an answer is never earlier than one given before it), and it is
// used only while the reading is younger than knownRowAge.
type serverClock struct {
	mu           sync.Mutex
	dbTime, seen time.Time
	last         time.Time // the latest estimate given
}

// observe records that a statement read dbTime and its answer arrived at
// seen. A reading that puts the database's time earlier than the one kept
// does is ignored unless the one kept is old.
func (c *serverClock) observe(dbTime, seen time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen.IsZero() || seen.Sub(c.seen) >= knownRowAge/2 || dbTime.Sub(c.dbTime) >= seen.Sub(c.seen) {
		c.dbTime, c.seen = dbTime, seen
	}
}

// estimate returns the database's time at now, if a recent reading gives
// it.
func (c *serverClock) estimate(now time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	age := now.Sub(c.seen)
	if c.seen.IsZero() || age >= knownRowAge || age < 0 {
		return time.Time{}, false
	}
	est := driver.Timestamp(c.dbTime.Add(discount(age)))
	if est.Before(c.last) {
		est = c.last
	}
	c.last = est
	return est, true
}

// given records t, a time Now answered from a read of the clock, so that
// an estimate after it is not earlier.
func (c *serverClock) given(t time.Time) {
	c.mu.Lock()
	if t.After(c.last) {
		c.last = t
	}
	c.mu.Unlock()
}
