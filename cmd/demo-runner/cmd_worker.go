package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

// worker: take queued runs by lease until stopped (the loop is in worker.go).
func (c commands) worker() *cobra.Command {
	o := c.o
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Take queued runs by lease and run them until stopped",
		Long: `Worker claims runnable runs and executes them, up to --slots at once, renewing the lease
on each run in hand. Whenever slots are free it claims that many runs in one call, and starts
queued ones in the claim's own write. A run that reaches a wait or a sleep step is parked in
the store, its lease released: it takes no slot until a signal or its time wakes it, and then
any worker goes on with it. Any number of workers, on any number of machines, share
one store. On SIGTERM the runs in hand may finish within --grace, then they are interrupted.
Crash recovery runs at start and every --recover-every.`,
		Example: `  demo-runner worker
  demo-runner worker --slots 8                   # eight runs at once
  demo-runner worker --once                      # stop when nothing is runnable
  demo-runner worker --recovery takeover --statuses queued,waiting,running`,
		Args:    cli.ExactArgs(),
		PreRunE: func(*cobra.Command, []string) error { return o.checkWorker() },
		RunE: c.withApp(executes, func(ctx context.Context, a *app, args []string) error {
			if o.recoverEvery > 0 && !o.once {
				// Recovery lives as long as the worker loop, and ends before
				// the store closes, however the loop ends.
				rctx, stopRecovery := context.WithCancel(ctx)
				recovering := make(chan struct{})
				go func() { defer close(recovering); a.recoverPeriodically(rctx, o.recoverEvery) }()
				defer func() { stopRecovery(); <-recovering }()
			}
			if o.metricsAddr != "" {
				lis, err := net.Listen("tcp", o.metricsAddr)
				if err != nil {
					return exitError{Code: exitFailure, Msg: fmt.Sprintf("--metrics-addr: %v", err)}
				}
				a.log.Info("serving metrics", "addr", lis.Addr().String())
				mctx, stopMetrics := context.WithCancel(ctx)
				serving := make(chan struct{})
				go func() { defer close(serving); a.serveMetrics(mctx, lis) }()
				defer func() { stopMetrics(); <-serving }()
			}
			return a.worker(ctx, workerParams{Statuses: strings.Split(o.statuses, ","), Poll: o.poll, Grace: o.grace, Once: o.once, Slots: o.slots})
		}),
	}
	w := cmd.Flags()
	w.StringVar(&o.statuses, "statuses", "queued,waiting", "statuses this worker claims (add running under the takeover policy)")
	w.DurationVar(&o.poll, "poll", time.Second, "how often an idle worker looks for runs")
	w.DurationVar(&o.grace, "grace", 30*time.Second, "on SIGTERM, how long the run in hand may take to finish before it is interrupted")
	w.BoolVar(&o.once, "once", false, "stop when no run is runnable")
	w.IntVar(&o.slots, "slots", 1, "how many runs the worker executes at once (a run that waits for a signal or sleeps is parked in the store and takes none)")
	w.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address while the worker runs (off when empty)")
	w.DurationVar(&o.recoverEvery, "recover-every", time.Minute,
		"how often the worker also runs crash recovery, for runs that workers which died and were not restarted left behind (0: only at start)")
	return cmd
}
