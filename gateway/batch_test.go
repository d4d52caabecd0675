package gateway_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
)

// Batches are authorized as their single calls: a reader may make none, a
// worker claims in its own name and writes only under its own leases (one
// item that may not be written refuses the whole batch, naming it, and
// changes nothing), and every item's actor is the worker's principal.
func TestTheGatewayAuthorizesBatchesAsTheirSingleCalls(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	w := newWorldWith(t, reg)
	operator := w.dial(t, "operator-o")
	workerA, workerB, reader := w.dial(t, "worker-a"), w.dial(t, "worker-b"), w.dial(t, "reader-r")
	for _, s := range []runstate.Store{operator, workerA, reader} {
		if ok := s.Features().BatchUpdater != nil; !ok {
			t.Fatalf("the gateway's store %T offers no batches", s)
		}
	}
	someoneElse := runstate.Actor{Kind: runstate.ActorOperator, ID: "someone-else"}
	asA := runstate.Owner{Worker: "worker-a", Incarnation: "1"}

	// A worker's batch create and claim are recorded as its own.
	if _, err := featuretest.Must(runstate.As[runstate.BatchCreator](workerA)).CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{
		{RunID: "a1", WorkflowName: "wa", Actor: someoneElse}, {RunID: "a2", WorkflowName: "wa", Actor: someoneElse}}}); err != nil {
		t.Fatalf("a worker creates a batch: %v", err)
	}
	if _, err := operator.CreateRun(ctx, runstate.CreateRunParams{RunID: "b1", WorkflowName: "wb"}); err != nil {
		t.Fatal(err)
	}
	claimsA, err := featuretest.Must(runstate.As[runstate.BatchClaimer](workerA)).ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: asA, TTL: time.Minute, Max: 2,
		Filter: runstate.RunnableFilter{WorkflowName: "wa"}, Start: true, Actor: someoneElse})
	if err != nil || len(claimsA.Claims) != 2 {
		t.Fatalf("worker-a claims a batch in its own name: %+v, %v", claimsA, err)
	}
	claimB, err := workerB.ClaimRun(ctx, runstate.ClaimRunParams{RunID: "b1", Owner: runstate.Owner{Worker: "worker-b", Incarnation: "1"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// snapshot is everything a refused batch could have changed.
	type state struct {
		runs   []runstate.RunSnapshot
		events int
	}
	snapshot := func() state {
		var s state
		for _, id := range []string{"a1", "a2", "b1"} {
			run, err := w.store.GetRun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			page, err := w.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id})
			if err != nil {
				t.Fatal(err)
			}
			s.runs, s.events = append(s.runs, run), s.events+len(page.Events)
		}
		if page, _ := w.store.ListRuns(ctx, runstate.ListRunsParams{}); len(page.Runs) != 3 {
			t.Fatalf("%d runs", len(page.Runs))
		}
		return s
	}
	before := snapshot()
	finish := func(c runstate.Claim) runstate.UpdateRunParams {
		return runstate.UpdateRunParams{RunID: c.Run.RunID, ExpectedVersion: c.Run.Version, LeaseToken: c.Lease.Token, Status: "success", Actor: someoneElse}
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		index int // the item named, -1 for none
	}{
		{"a reader creating a batch", func() error {
			_, err := featuretest.Must(runstate.As[runstate.BatchCreator](reader)).CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{{RunID: "r9", WorkflowName: "w"}}})
			return err
		}, -1},
		{"a reader updating a batch", func() error {
			_, err := featuretest.Must(runstate.As[runstate.BatchUpdater](reader)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{finish(claimsA.Claims[0])}})
			return err
		}, -1},
		{"a reader claiming a batch", func() error {
			_, err := featuretest.Must(runstate.As[runstate.BatchClaimer](reader)).ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "reader-r", Incarnation: "1"}, TTL: time.Minute, Max: 1})
			return err
		}, -1},
		{"a worker claiming a batch in another's name", func() error {
			_, err := featuretest.Must(runstate.As[runstate.BatchClaimer](workerB)).ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: asA, TTL: time.Minute, Max: 1})
			return err
		}, -1},
		{"a worker updating another's lease in a batch", func() error {
			_, err := featuretest.Must(runstate.As[runstate.BatchUpdater](workerB)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
				finish(claimB), finish(claimsA.Claims[1])}})
			return err
		}, 1},
		{"a worker updating without a lease in a batch", func() error {
			unleased := finish(claimsA.Claims[0])
			unleased.LeaseToken = 0
			_, err := featuretest.Must(runstate.As[runstate.BatchUpdater](workerA)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
				finish(claimsA.Claims[1]), unleased}})
			return err
		}, 1},
		{"a worker updating under a token not yet issued in a batch", func() error {
			next := finish(claimB)
			next.RunID, next.LeaseToken = "a1", claimsA.Claims[0].Lease.Token+1
			_, err := featuretest.Must(runstate.As[runstate.BatchUpdater](workerB)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{next}})
			return err
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, runstate.ErrPermissionDenied) {
				t.Fatalf("want PERMISSION_DENIED, got %v", err)
			}
			var item *runstate.BatchItemError
			if named := errors.As(err, &item); named != (tc.index >= 0) || named && item.Index != tc.index {
				t.Fatalf("the refusal %v names item %+v, want %d", err, item, tc.index)
			}
			if after := snapshot(); !reflect.DeepEqual(after, before) {
				t.Fatalf("the store changed: %+v", after)
			}
		})
	}

	// The holder finishes its runs in one batch; every write is its own.
	res, err := featuretest.Must(runstate.As[runstate.BatchUpdater](workerA)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		finish(claimsA.Claims[0]), finish(claimsA.Claims[1])}})
	if err != nil || res.Items[0].Err != nil || res.Items[1].Err != nil {
		t.Fatalf("the holder's batch: %+v, %v", res, err)
	}
	for _, id := range []string{"a1", "a2"} {
		page, err := operator.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			if e.Actor != (runstate.Actor{Kind: runstate.ActorWorker, ID: "worker-a", Principal: "worker-a"}) {
				t.Fatalf("run %s: the %s event is recorded as %+v", id, e.Kind, e.Actor)
			}
		}
	}

	// Logs and metrics name the batch methods.
	logged := w.logs.String()
	for _, want := range []string{"method=UpdateRuns", "method=CreateRuns", "method=ClaimRuns"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the gateway's log lacks %q", want)
		}
	}
	if got := counterValue(t, reg, "runstate_gateway_requests_total", map[string]string{"method": "UpdateRuns", "code": "OK"}); got != 1 {
		t.Errorf("UpdateRuns OK counted %v times", got)
	}
}
