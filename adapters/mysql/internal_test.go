package mysql

import (
	"context"
	"fmt"
	"github.com/runstate/runstate/spec/driver"
	"log/slog"
	"testing"

	"github.com/runstate/runstate/adapters/mysql/testserver"
)

// openInternal opens a store on a fresh database, dropped after the test.
func openInternal(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	srv := testserver.Find(t)
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
