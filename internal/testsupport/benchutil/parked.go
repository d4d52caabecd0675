package benchutil

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// ParkRuns leaves n runs parked in s as a fleet's waits and timers leave
// them: of the highest priority (so that a store that does not keep parked
// runs apart meets them first in claim order), each claimed and started,
// then moved to waiting and parked in its worker's last write, which
// releases the lease; half for a signal (until a day from now) and half as
// timers due over the next ten minutes. They are made in batches of 100.
func ParkRuns(tb testing.TB, s runstate.Store, n int) {
	tb.Helper()
	ctx := context.Background()
	now := time.Now()
	owner := runstate.Owner{Worker: "parker", Incarnation: "1"}
	for made := 0; made < n; made += 100 {
		size := min(100, n-made)
		create := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, size)}
		for i := range create.Runs {
			create.Runs[i] = runstate.CreateRunParams{WorkflowName: "parked", Priority: runstate.MaxPriority}
		}
		if _, err := runstate.CreateRuns(ctx, s, create); err != nil {
			tb.Fatalf("creating runs to park: %v", err)
		}
		claimed, err := runstate.ClaimRuns(ctx, s, runstate.ClaimRunsParams{Owner: owner, TTL: time.Hour, Max: size, Start: true,
			Filter: runstate.RunnableFilter{Statuses: []string{string(runstate.StatusQueued)}, WorkflowName: "parked"}})
		if err != nil || len(claimed.Claims) != size {
			tb.Fatalf("claiming the runs to park: %d of %d, %v", len(claimed.Claims), size, err)
		}
		up := runstate.UpdateRunsParams{Updates: make([]runstate.UpdateRunParams, size)}
		for i, c := range claimed.Claims {
			wake := now.Add(24 * time.Hour) // a signal's wait
			if (made+i)%2 == 1 {
				wake = now.Add(time.Minute + time.Duration(made+i)*(9*time.Minute)/time.Duration(n)) // a timer
			}
			up.Updates[i] = runstate.UpdateRunParams{RunID: c.Run.RunID, ExpectedVersion: c.Run.Version, LeaseToken: c.Lease.Token,
				Status: string(runstate.StatusWaiting), WakeAt: &wake, ReleaseLease: true}
		}
		res, err := runstate.UpdateRuns(ctx, s, up)
		if err != nil {
			tb.Fatalf("parking runs: %v", err)
		}
		for i, item := range res.Items {
			if item.Err != nil {
				tb.Fatalf("parking run %s: %v", up.Updates[i].RunID, item.Err)
			}
		}
	}
}

// BenchParked measures claim-next and the runnable listing with none and
// with each of parked runs parked (ParkRuns) beside the queued ones: a
// parked run should cost a claim and a listing page nothing. open gives a
// fresh store for each count. The listing reads a page of 100 of 100
// queued runs; claim-next takes queued runs one at a time from one
// worker.
func BenchParked(b *testing.B, open func(*testing.B) runstate.Store, parked ...int) {
	ctx := context.Background()
	for _, n := range append([]int{0}, parked...) {
		s := open(b)
		ParkRuns(b, s, n)
		FillQueue(b, s, 100)
		b.Run(fmt.Sprintf("list-runnable/parked=%d", n), func(b *testing.B) {
			b.ResetTimer()
			for range b.N {
				page, err := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{Limit: 100})
				if err != nil || len(page.Runs) != 100 {
					b.Fatalf("listing: %d runs, %v", len(page.Runs), err)
				}
			}
		})
		b.Run(fmt.Sprintf("claim-next/parked=%d", n), func(b *testing.B) {
			b.StopTimer()
			FillQueue(b, s, b.N)
			owner := runstate.Owner{Worker: "bench", Incarnation: "1"}
			b.StartTimer()
			for range b.N {
				cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
				if err != nil || cl.Run.WorkflowName != "bench" {
					b.Fatalf("claim-next took %s (%s): %v", cl.Run.RunID, cl.Run.WorkflowName, err)
				}
			}
		})
	}
}

// DueTogether parks n runs of s until one instant, of priorities 0 to 9,
// and lets workers claim them, claim-next after claim-next, once that
// instant has passed. Every claim must succeed until the runs are gone
// (no failed claim, no UNAVAILABLE for a run another worker held), and
// each run is claimed once. A worker's claims come in claim order, but
// that a claim may pass over a run another claim holds at that instant
// and take a lower one (LEASE-017): such claims are counted and logged,
// not failed (one claimer alone takes due runs in claim order: WAKE-001).
func DueTogether(t testing.TB, s runstate.Store, n, workers int) {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "due", Priority: i % 10})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.RunID)
	}
	at := time.Now().Add(time.Second)
	park := runstate.UpdateRunsParams{Updates: make([]runstate.UpdateRunParams, len(ids))}
	for i, id := range ids {
		park.Updates[i] = runstate.UpdateRunParams{RunID: id, ExpectedVersion: 1, WakeAt: &at}
	}
	res, err := runstate.UpdateRuns(ctx, s, park)
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range res.Items {
		if item.Err != nil {
			t.Fatal(item.Err)
		}
	}
	cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "early", Incarnation: "1"}, TTL: time.Hour})
	if err == nil && time.Now().Before(at.Add(-100*time.Millisecond)) {
		t.Fatalf("run %s was claimed before the instant its timer is due", cl.Run.RunID)
	}
	if err == nil {
		t.Skip("parking the runs took until their instant: nothing to judge")
	}
	time.Sleep(time.Until(at) + 10*time.Millisecond)
	got := make([][]runstate.RunSnapshot, workers)
	errs := make([][]error, workers)
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
			for {
				cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
				switch {
				case errors.Is(err, runstate.ErrNotFound):
					return
				case err != nil:
					errs[w] = append(errs[w], err)
					continue
				}
				got[w] = append(got[w], cl.Run)
			}
		}()
	}
	for range workers {
		<-done
	}
	seen := map[string]int{}
	passedOver := 0
	for w := range workers {
		for _, err := range errs[w] {
			t.Errorf("worker %d: a claim failed while due runs remained: %v", w, err)
		}
		for i, r := range got[w] {
			seen[r.RunID]++
			if i == 0 {
				continue
			}
			if driver.RunnablePositionOf(r).Less(driver.RunnablePositionOf(got[w][i-1])) {
				passedOver++
			}
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("run %s claimed %d times", id, seen[id])
		}
	}
	t.Logf("%d runs due at one instant, %d workers: every claim succeeded, each run once; %d claims came after a lower-ranked one of the same worker (a run another claim held was passed over)",
		n, workers, passedOver)
}
