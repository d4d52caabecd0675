// Package worker runs a handler over the runs of a runstate store, as a
// job queue's client runs its jobs: the fleet written once, with the
// fencing, renewals, retries and drain that are easy to get wrong.
//
//	w, err := worker.New(worker.Config{
//		Store:   store,
//		Owner:   runstate.Owner{Worker: "billing-1", Incarnation: uuid},
//		Slots:   16,
//		Handler: func(ctx context.Context, job *worker.Job) error { return charge(ctx, job.Run()) },
//	})
//	err = w.Run(ctx) // until ctx ends, then drains
//
// # What a worker does
//
//   - Slots: at most Config.Slots handlers run at once. Whenever slots are
//     free the worker claims that many runs in one call (runstate.ClaimRuns
//     with Start: each claimed run moves to running in the claim's own
//     write), best first, as the store's claim order says. While runs wait
//     to be claimed (the last claim took all it asked for), a claim waits
//     up to that claim's time for every slot to be free, so that one claim
//     serves all the slots that free meanwhile.
//   - Wake-ups: a store with a runstate.RunnableWatcher wakes an idle
//     worker soon after a run becomes claimable; the worker also polls
//     (Config.Poll), for stores without one, for leases that expire (which
//     notify nobody) and for notices lost with a connection.
//   - A fenced context: the handler's context is cancelled, with a cause
//     errors.Is matches, when the run's lease is lost
//     (runstate.ErrLeaseLost: another worker owns the run), when it may
//     have lapsed because renewals kept failing (ErrLeaseLapsed), and when
//     the worker drains past its grace (ErrDraining). A handler stops its
//     side effects then: whatever it writes afterwards through Job.Update is
//     refused by the store's fencing anyway.
//   - Renewals: one timer renews the leases of every run in hand at once,
//     each RenewLease sent together, which a store with group commit (the
//     driver kit's) writes as one shared write. Every renewal that fails,
//     or lands after the lease's expiry, is logged with its margin.
//   - Completions: a handler's outcome goes to a completer and its slot
//     takes the next run at once; completers write outcomes in batches of
//     up to Config.CompleteBatch (runstate.UpdateRuns, each item fenced by
//     the run's lease and releasing it in the same write), with up to
//     Config.CompletionsInFlight batches in flight. An outcome goes as
//     soon as no write is in flight, or, with Config.CompleteLinger, waits
//     that long for others to share its write (fewer, larger writes; the
//     run stays leased that much longer); once the last handler of a
//     drain has returned, what waits is written at once. An outcome
//     counts (Stats, Config.OnDone) only once its write is committed;
//     until then the run stays under the worker's lease, renewed as the
//     others.
//   - Retries: a handler error is retried up to Config.MaxAttempts times
//     with Config.Backoff between attempts, the contract's way: the run
//     goes back to waiting, parked until the backoff ends
//     (UpdateRunParams.WakeAt) and released, so that it holds no slot and
//     no lease while it waits, and any worker claims it when it is due.
//     The attempts so far are kept in the run's label AttemptLabel. An
//     error wrapped with Permanent, a panic, or the last attempt's error
//     fails the run, with a runstate.Diagnostic that says why.
//   - Drain: when Run's context ends the worker claims nothing more and
//     lets the runs in hand finish for up to Config.Grace; then it cancels
//     their contexts (ErrDraining) and hands each run back (running to
//     waiting, released, claimable at once by any worker). Run returns once
//     every outcome is written, or could not be.
//
// # A crash at any point
//
// Nothing a worker holds lives only in its memory. A worker that dies
// (SIGKILL, a lost machine) leaves each run it held under a lease that
// expires Config.LeaseTTL after its last renewal at the latest:
//
//   - claimed, not yet started by the handler, or in the handler: the run
//     is running under an expired lease; runstate.Recover applies its
//     policy (interrupt, fail, or takeover), and after a takeover a worker
//     whose Config.Filter includes running claims it and runs the handler
//     again, Job.TakenOver set. The
//     handler's effects up to the crash happened; a handler whose effects
//     must happen once makes them idempotent by run id.
//   - outcome computed, completion not yet committed: the same, as the
//     outcome was never written. A completion that committed is final.
//   - parked for a retry: the run is waiting with its wake time and holds
//     no lease: any worker claims it when it is due.
//
// A store without leases cannot be shared safely, and New refuses it
// (runstate.ErrUnsupported).
package worker
