package sqltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

// KnownStore is a SQL store whose handle keeps the rows it wrote last and
// writes them again without reading them (sqlkit's known.go).
type KnownStore interface {
	benchutil.BatchStore
	// DB is the store's connection pool.
	DB() *sqlx.DB
	// ShiftKnownTimes moves the database time of the rows the handle
	// keeps by d, as a client clock running fast would.
	ShiftKnownTimes(d time.Duration)
}

// KnownRows checks an adapter's known rows: a write after the handle's own
// is one statement, and a row written elsewhere, or kept with a time ahead
// of the database's, is read again, never written from what was kept.
type KnownRows struct {
	// Open opens two handles on one fresh database, the first counted on c.
	Open func(t *testing.T, c *benchutil.Counter) (counted, other KnownStore)
	// Now is the query that reads the database server's clock now.
	Now string
}

// serverTime is the database server's clock now.
func (k KnownRows) serverTime(t *testing.T, s KnownStore) time.Time {
	t.Helper()
	var now time.Time
	if err := s.DB().GetContext(context.Background(), &now, k.Now); err != nil {
		t.Fatal(err)
	}
	return now
}

// Run runs every check, each a subtest.
func (k KnownRows) Run(t *testing.T) {
	t.Run("AWriteAfterItsOwnWriteIsOneStatement", k.aWriteAfterItsOwnWriteIsOneStatement)
	t.Run("AKnownRowWrittenElsewhereIsReadAgain", k.aKnownRowWrittenElsewhereIsReadAgain)
	t.Run("AKnownRowWrittenTheLockingWayIsReadAgain", k.aKnownRowWrittenTheLockingWayIsReadAgain)
	t.Run("AKeptRowNeverRefusesAlone", k.aKeptRowNeverRefusesAlone)
	t.Run("AKeptRowAheadOfTheDatabaseIsReadAgain", k.aKeptRowAheadOfTheDatabaseIsReadAgain)
	t.Run("ClaimsOfOneHandlePassOverEachOther", k.claimsOfOneHandlePassOverEachOther)
}

// claimOne creates a run on s and claims and starts it.
func claimOne(t *testing.T, s KnownStore) runstate.Claim {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "known"}); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Minute,
		Max: 1, Start: true})
	if err != nil || len(claimed.Claims) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	return claimed.Claims[0]
}

// complete moves claim's run to success and releases its lease, as a
// worker's last write does, and returns what that sent, counted on c.
func complete(t *testing.T, s KnownStore, c *benchutil.Counter, claim runstate.Claim) (runstate.RunSnapshot, benchutil.Cost) {
	t.Helper()
	var done runstate.RunSnapshot
	cost, err := c.Cost(func() (err error) {
		done, err = s.UpdateRun(context.Background(), runstate.UpdateRunParams{RunID: claim.Run.RunID,
			ExpectedVersion: claim.Run.Version, LeaseToken: claim.Lease.Token, Status: string(runstate.StatusSuccess), ReleaseLease: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return done, cost
}

// moveElsewhere moves claim's run to waiting through other, a handle that
// did not claim it, and returns the run as written.
func moveElsewhere(t *testing.T, other KnownStore, claim runstate.Claim) runstate.RunSnapshot {
	t.Helper()
	moved, err := other.UpdateRun(context.Background(), runstate.UpdateRunParams{RunID: claim.Run.RunID,
		ExpectedVersion: claim.Run.Version, LeaseToken: claim.Lease.Token, Status: string(runstate.StatusWaiting)})
	if err != nil {
		t.Fatal(err)
	}
	return moved
}

// A worker's write of a run its handle has just written is one statement:
// the handle decides on the row it wrote, and the statement checks that
// the row is still that version. The time of the write is the database's,
// estimated, never ahead of it; so is a creation's, without a read of the
// clock.
func (k KnownRows) aWriteAfterItsOwnWriteIsOneStatement(t *testing.T) {
	var c benchutil.Counter
	s, _ := k.Open(t, &c)
	ctx := context.Background()
	claim := claimOne(t, s)

	done, cost := complete(t, s, &c, claim)
	if cost.Statements != 1 {
		t.Errorf("completing a run this handle claimed sent %v; want 1 statement", cost)
	}
	var created runstate.RunSnapshot
	cost, err := c.Cost(func() (err error) {
		created, err = s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "known"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if cost.Statements != 1 {
		t.Errorf("a creation after a write sent %v; want 1 statement (no read of the clock)", cost)
	}

	serverNow := k.serverTime(t, s)
	for _, stamp := range []time.Time{done.UpdatedAt, done.FinishedAt, created.CreatedAt} {
		if stamp.Before(claim.Run.UpdatedAt) || stamp.After(serverNow) {
			t.Errorf("a stamp %v is outside [the claim's %v, the database's time after %v]", stamp, claim.Run.UpdatedAt, serverNow)
		}
	}
	got, err := s.GetRun(ctx, claim.Run.RunID)
	if err != nil || got.Status != runstate.StatusSuccess || got.Version != done.Version {
		t.Fatalf("stored %+v, %v; want the success written", got, err)
	}
	audit, err := s.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: claim.Run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := false
	for i, ev := range audit.Events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the trail has a gap", i+1, ev.Seq)
		}
		succeeded = succeeded || ev.To == runstate.StatusSuccess
	}
	if !succeeded {
		t.Fatalf("the trail %+v has no move to success", audit.Events)
	}
}

// A row this handle wrote and another handle wrote after it is not written
// from what this handle knew: the write finds another version, reads the
// row again and decides on it, here refusing a stale version, with
// nothing written.
func (k KnownRows) aKnownRowWrittenElsewhereIsReadAgain(t *testing.T) {
	var c benchutil.Counter
	s, other := k.Open(t, &c)
	ctx := context.Background()
	claim := claimOne(t, s)
	moved := moveElsewhere(t, other, claim)
	completeStale(t, s, &c, claim)
	got, err := s.GetRun(ctx, claim.Run.RunID)
	if err != nil || got.Status != runstate.StatusWaiting || got.Version != moved.Version {
		t.Fatalf("stored %+v, %v; want the other handle's write, untouched", got, err)
	}
	// The refusal wrote nothing, so nothing is known: the next write
	// reads the row, and writes it.
	cost, err := c.Cost(func() error {
		_, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: claim.Run.RunID, ExpectedVersion: moved.Version,
			LeaseToken: claim.Lease.Token, Status: string(runstate.StatusRunning)})
		return err
	})
	if err != nil || cost.Statements != 2 {
		t.Fatalf("the write after a read sent %v, %v; want a read and a write, the refusal kept nothing known", cost, err)
	}
}

// A row written the locking way (a change of labels) after this handle
// wrote it is not written from what this handle knew: that way's UPDATEs
// change the row's version too.
func (k KnownRows) aKnownRowWrittenTheLockingWayIsReadAgain(t *testing.T) {
	var c benchutil.Counter
	s, other := k.Open(t, &c)
	ctx := context.Background()
	claim := claimOne(t, s)
	relabelled, err := other.UpdateRun(ctx, runstate.UpdateRunParams{RunID: claim.Run.RunID, ExpectedVersion: claim.Run.Version,
		LeaseToken: claim.Lease.Token, Labels: map[string]string{"moved": "elsewhere"}})
	if err != nil {
		t.Fatal(err)
	}
	completeStale(t, s, &c, claim)
	got, err := s.GetRun(ctx, claim.Run.RunID)
	if err != nil || got.Version != relabelled.Version || got.Labels["moved"] != "elsewhere" || got.Status != runstate.StatusRunning {
		t.Fatalf("stored %+v, %v; want the relabelling, untouched", got, err)
	}
}

// completeStale completes claim's run through s, which wrote it last,
// after another write of it: the write finds another version, and the
// read that follows refuses the claim's version, with nothing written.
func completeStale(t *testing.T, s KnownStore, c *benchutil.Counter, claim runstate.Claim) {
	t.Helper()
	cost, err := c.Cost(func() error {
		_, err := s.UpdateRun(context.Background(), runstate.UpdateRunParams{RunID: claim.Run.RunID, ExpectedVersion: claim.Run.Version,
			LeaseToken: claim.Lease.Token, Status: string(runstate.StatusSuccess), ReleaseLease: true})
		return err
	})
	if !errors.Is(err, runstate.ErrVersionConflict) {
		t.Fatalf("a write from a stale version: %v; want ErrVersionConflict", err)
	}
	if cost.Statements != 2 {
		t.Errorf("sent %v; want 2 statements: the write that finds another version, and the read", cost)
	}
}

// A refusal is never answered from a kept row: here the kept row is
// stale and would refuse the version asked for, which the run, as
// another handle left it, has; the write reads the row and succeeds.
func (k KnownRows) aKeptRowNeverRefusesAlone(t *testing.T) {
	var c benchutil.Counter
	s, other := k.Open(t, &c)
	ctx := context.Background()
	claim := claimOne(t, s)
	moved := moveElsewhere(t, other, claim)
	done, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: claim.Run.RunID, ExpectedVersion: moved.Version,
		LeaseToken: claim.Lease.Token, Status: string(runstate.StatusRunning)})
	if err != nil || done.Version != moved.Version+1 || done.Status != runstate.StatusRunning {
		t.Fatalf("a write from the run's current version: %+v, %v; want it applied", done, err)
	}
}

// A kept row whose estimated time is ahead of the database's (a client
// clock running fast) is not written from: the write is refused by the
// database, the row read, and the change decided and written on the
// database's time, with no stamp after it.
func (k KnownRows) aKeptRowAheadOfTheDatabaseIsReadAgain(t *testing.T) {
	var c benchutil.Counter
	s, _ := k.Open(t, &c)
	claim := claimOne(t, s)
	s.ShiftKnownTimes(time.Hour)
	done, cost := complete(t, s, &c, claim)
	if cost.Statements != 3 {
		t.Errorf("sent %v; want 3 statements: the write refused, the read, the write", cost)
	}
	serverNow := k.serverTime(t, s)
	if done.UpdatedAt.After(serverNow) || done.FinishedAt.After(serverNow) {
		t.Fatalf("stamped %v, finished %v: after the database's time %v", done.UpdatedAt, done.FinishedAt, serverNow)
	}
}

// Workers sharing one handle claim at once without taking the head of the
// queue from each other: each passes over the runs the others' claims are
// writing, so no claim loses its run and goes the locking way (a
// transaction), and no run is claimed twice.
func (k KnownRows) claimsOfOneHandlePassOverEachOther(t *testing.T) {
	var c benchutil.Counter
	s, _ := k.Open(t, &c)
	ctx := context.Background()
	const runs, workers = 240, 8
	create := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, runs)}
	for i := range create.Runs {
		create.Runs[i] = runstate.CreateRunParams{WorkflowName: "claims"}
	}
	if _, err := s.CreateRuns(ctx, create); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	claimedBy := map[string]string{}
	claimAll := func(owner runstate.Owner) error {
		for {
			claim, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Minute})
			if errors.Is(err, runstate.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			mu.Lock()
			other, twice := claimedBy[claim.Run.RunID]
			claimedBy[claim.Run.RunID] = owner.Worker
			mu.Unlock()
			if twice {
				return fmt.Errorf("run %s claimed by %s and %s", claim.Run.RunID, other, owner.Worker)
			}
		}
	}
	cost, err := c.Cost(func() error {
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
			wg.Go(func() { errs[w] = claimAll(owner) })
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimedBy) != runs {
		t.Fatalf("claimed %d runs of %d", len(claimedBy), runs)
	}
	t.Logf("%d claims by %d workers: %v", runs, workers, cost)
	// Each worker's last claim finds nothing, which the locking way
	// confirms (LEASE-017): a transaction each. Claims that all read the
	// head of the queue lost it to each other, and went the locking way,
	// about 200 times here.
	if cost.Commits > 2*workers {
		t.Fatalf("%d claims went the locking way (%v); want claims that pass over each other's runs", cost.Commits, cost)
	}
}
