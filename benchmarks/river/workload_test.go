package riverbench

import (
	"context"
	"log/slog"
	"testing"
)

// A workload is one system doing units of one kind of work on a fresh
// database. Only run is measured; tests call verify after it.
type workload interface {
	// prepare sets the database up (migrations, the units to take) on
	// connections of its own, all closed when it returns.
	prepare(ctx context.Context, dsn string, units int) error
	// run does the units: it opens its connections, calls sw.start right
	// before the work and sw.stop right after, and closes them.
	run(ctx context.Context, dsn string, units int, sw stopwatch) error
	// verify checks in the database that run did every unit once.
	verify(ctx context.Context, dsn string, units int) error
}

// stopwatch times a benchmark's work; tests time nothing.
type stopwatch interface {
	start()
	stop()
}

type benchTimer struct{ b *testing.B }

func (t benchTimer) start() { t.b.StartTimer() }
func (t benchTimer) stop()  { t.b.StopTimer() }

type noTimer struct{}

func (noTimer) start() {}
func (noTimer) stop()  {}

// poolSize bounds each side's connection pool, the same for both: enough
// for 32 workers each on a connection of its own.
const poolSize = 40

var quiet = slog.New(slog.DiscardHandler)
