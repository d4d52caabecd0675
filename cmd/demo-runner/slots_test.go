package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// A worker with --slots executes that many runs at once: it claims as many
// runs as it has free slots in one call, started in the claim's write (runs
// claimed together share the claim's time), and runs them side by side
// (four executions overlap); every run succeeds, its trail queued →
// running → success, and its lease released by the write that ended it.
func TestAWorkerWithSlotsRunsThatManyAtOnce(t *testing.T) {
	wf := writeWorkflow(t, "name: slots\nsteps:\n  - name: work\n    type: shell\n    command: sleep 1\n")
	dsn := freshSchema(t)
	global := []string{"--store", "postgres:" + dsn, "--data-dir", t.TempDir()}
	var ids []string
	for range 8 {
		out, errOut, code := demo(t, with(global, "submit", wf)...)
		if code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	if _, errOut, code := demo(t, with(global, "worker", "--slots", "4", "--once")...); code != 0 {
		t.Fatalf("worker --slots 4 --once: exit %d\n%s", code, errOut)
	}
	type span struct{ from, to time.Time }
	var spans []span
	startedAt := map[time.Time]int{} // runs started by each claim's write
	for _, id := range ids {
		if got := runStatus(t, global, id); got.Status != runstate.StatusSuccess {
			t.Fatalf("run %s ended %s, want success", id, got.Status)
		}
		var s span
		var path []runstate.RunStatus
		for _, ev := range runAudit(t, global, id) {
			path = append(path, ev.To)
			switch ev.To {
			case runstate.StatusRunning:
				s.from = ev.Time
				startedAt[ev.Time]++
			case runstate.StatusSuccess:
				s.to = ev.Time
			}
		}
		if !slices.Equal(path, []runstate.RunStatus{runstate.StatusQueued, runstate.StatusRunning, runstate.StatusSuccess}) {
			t.Errorf("run %s's trail went %v", id, path)
		}
		spans = append(spans, s)
	}
	most := 0 // the most runs executing at one instant: at some run's start
	for _, at := range spans {
		n := 0
		for _, s := range spans {
			if !s.from.After(at.from) && s.to.After(at.from) {
				n++
			}
		}
		most = max(most, n)
	}
	if most != 4 {
		t.Errorf("at most %d runs executed at once, want 4 (--slots 4)", most)
	}
	together := 0
	for _, n := range startedAt {
		together = max(together, n)
	}
	if together < 2 {
		t.Errorf("every run was started by a claim of its own; want the first claim to start four")
	}
	// The worker's lease on a finished run was released by the write that
	// ended it: renewing it is LEASE_LOST.
	s := inspect(context.Background(), t, sharedStore{dsn: dsn, postgres: true}, "", nil)
	for _, ev := range runAudit(t, global, ids[0]) {
		if ev.To != runstate.StatusSuccess {
			continue
		}
		if ev.LeaseToken == 0 {
			t.Fatalf("run %s's success carries no lease token: %+v", ids[0], ev)
		}
		_, err := s.RenewLease(context.Background(), runstate.RenewLeaseParams{RunID: ids[0], Token: ev.LeaseToken, TTL: time.Minute})
		if !errors.Is(err, runstate.ErrLeaseLost) {
			t.Errorf("renewing run %s's lease (token %d) after its success: %v, want LEASE_LOST (released with the success)", ids[0], ev.LeaseToken, err)
		}
	}
}
