package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/worker"
)

// A worker of four slots works every queued run and stops, here once all
// three are done; in a service it runs until its context ends.
func Example() {
	ctx := context.Background()
	store, _ := memory.Open(ctx, memory.Options{})
	defer store.Close()
	for _, name := range []string{"invoice", "receipt", "refund"} {
		store.CreateRun(ctx, runstate.CreateRunParams{RunID: name, WorkflowName: "billing"})
	}
	ctx, stop := context.WithCancel(ctx)
	var done atomic.Int64
	w, err := worker.New(worker.Config{
		Store: store,
		Owner: runstate.Owner{Worker: "billing-1", Incarnation: "example"},
		Slots: 4,
		Handler: func(ctx context.Context, job *worker.Job) error {
			return nil // the run's work, under its lease; ctx ends if the lease is lost
		},
		OnDone: func(d worker.Done) {
			if done.Add(1) == 3 {
				stop()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	for _, id := range []string{"invoice", "receipt", "refund"} {
		run, _ := store.GetRun(context.Background(), id)
		fmt.Println(id, run.Status)
	}
	// Output:
	// invoice success
	// receipt success
	// refund success
}
