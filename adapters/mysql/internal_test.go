package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// openInternal opens a store on a fresh database, dropped after the test.
func openInternal(t testing.TB) *Store {
	t.Helper()
	ctx := context.Background()
	srv := sqltest.MySQL.Find(t)
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Options{DSN: srv.DSN(name), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); srv.DropDatabase(ctx, name) })
	return s
}

// The queue numbers the statements spell out are the ones writes store.
func TestQueueNumbersAgree(t *testing.T) {
	if fmt.Sprint(int(driver.QueueUnleased)) != inQueueUnleased || fmt.Sprint(int(driver.QueueLeased)) != inQueueLeased {
		t.Fatalf("queue %d/%d written, %s/%s searched", driver.QueueUnleased, driver.QueueLeased, inQueueUnleased, inQueueLeased)
	}
}

// The plain lease read answers as the locking one would.
func TestGetLeaseReadsWithoutALock(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLease(ctx, "r1"); err != nil || l.Token != 0 {
		t.Fatalf("a run never leased: %+v, %v", l, err)
	}
	claim, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: "r1", Owner: runstate.Owner{Worker: "w1", Incarnation: "a"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLease(ctx, "r1"); err != nil || l != claim.Lease {
		t.Fatalf("after a claim: %+v, %v; want %+v", l, err, claim.Lease)
	}
	if _, err := s.GetLease(ctx, "nope"); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatalf("an unknown run: %v", err)
	}
}

// Transactions are READ COMMITTED without a statement of their own: every
// connection of the pool is set so when it opens.
func TestTransactionsAreReadCommitted(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	err := s.runs.InTx(ctx, func(tx *sqlx.Tx) error {
		var level string
		err := tx.GetContext(ctx, &level, "SELECT @@tx_isolation")
		if err != nil { // MySQL 8 names it transaction_isolation only
			err = tx.GetContext(ctx, &level, "SELECT @@transaction_isolation")
		}
		if err == nil && level != "READ-COMMITTED" {
			t.Errorf("a transaction's isolation is %s, want READ-COMMITTED", level)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
