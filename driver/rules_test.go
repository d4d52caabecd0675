package driver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

func TestConflictMessageSaysWhatToDo(t *testing.T) {
	e := versionConflict("r1", 3, 5)
	if !strings.Contains(e.Error(), "version 5") || !strings.Contains(e.Error(), "expected 3") {
		t.Errorf("conflict message does not say what to do: %q", e.Error())
	}
}

func TestCursorsRoundTripAndRejectTampering(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	pos := RunPosition{CreatedAt: at, RunID: "run-1"}
	q, err := prepareListRuns(runstate.ListRunsParams{Cursor: pos.cursor()})
	if err != nil || q.After == nil || !q.After.CreatedAt.Equal(at) || q.After.RunID != "run-1" {
		t.Fatalf("runs cursor round trip: %+v, %v", q.After, err)
	}
	rp := RunnablePosition{Priority: -4, CreatedAt: at, RunID: "run-2"}
	rq, err := prepareRunnable(runstate.RunnableFilter{}, 0, rp.cursor())
	if err != nil || rq.After == nil || *rq.After != rp {
		t.Fatalf("runnable cursor round trip: %+v, %v", rq.After, err)
	}
	// A cursor of one listing is not valid for the other.
	if _, err := prepareListRuns(runstate.ListRunsParams{Cursor: rp.cursor()}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("runnable cursor accepted by ListRuns: %v", err)
	}
	if _, err := prepareListRuns(runstate.ListRunsParams{Cursor: pos.cursor() + "x"}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("tampered cursor accepted: %v", err)
	}
}

func TestRunnableOrder(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := RunnablePosition{Priority: 5, CreatedAt: t0.Add(time.Second), RunID: "a"}
	b := RunnablePosition{Priority: 1, CreatedAt: t0, RunID: "b"}
	c := RunnablePosition{Priority: 5, CreatedAt: t0.Add(time.Second), RunID: "c"}
	if !a.Less(b) || !a.Less(c) || c.Less(a) || a.Compare(a) != 0 {
		t.Error("claim order is priority descending, then created_at, then run_id")
	}
}

func TestLeaseRules(t *testing.T) {
	now := time.Unix(1000, 0)
	run := runstate.RunSnapshot{RunID: "r", Status: runstate.StatusQueued}
	w1 := runstate.Owner{Worker: "w1", Incarnation: "a"}
	l, err := LeaseState{}.claim(run, claimRequest{w1, time.Minute, defaultRunnableStatuses()}, now)
	if err != nil || l.Token != 1 || !l.Live(now) || l.Live(now.Add(time.Minute)) {
		t.Fatalf("first claim: %+v %v", l, err)
	}
	if _, err := l.claim(run, claimRequest{runstate.Owner{Worker: "w2"}, time.Minute, defaultRunnableStatuses()}, now); !errors.Is(err, runstate.ErrLeaseHeld) {
		t.Errorf("claim over a live lease: %v", err)
	}
	if l2, err := l.claim(run, claimRequest{runstate.Owner{Worker: "w1", Incarnation: "b"}, time.Minute, defaultRunnableStatuses()}, now); err != nil || l2.Token != 2 {
		t.Errorf("new incarnation: %+v %v", l2, err)
	}
	if err := l.checkFence("r", 2); !errors.Is(err, runstate.ErrLeaseLost) {
		t.Errorf("fence with a never-issued token: %v", err)
	}
	released, _ := l.release("r", 1)
	if released.Live(now) || !errors.Is(released.checkFence("r", 1), runstate.ErrLeaseLost) {
		t.Error("a released lease must be dead and fence nothing")
	}
}

// A listing's labels are checked also when it names a valid workflow.
func TestSelectionChecksEveryPart(t *testing.T) {
	bad := map[string]string{"not a key!": "v"}
	if _, err := prepareListRuns(runstate.ListRunsParams{WorkflowName: "w", Labels: bad}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("ListRuns with a workflow and a bad label key: %v", err)
	}
	if _, err := prepareRunnable(runstate.RunnableFilter{WorkflowName: "w", Labels: bad}, 0, ""); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("a runnable filter with a workflow and a bad label key: %v", err)
	}
}

// Events get consecutive numbers after the run's last.
func TestEventsAreNumberedAfterTheLast(t *testing.T) {
	got := number(make([]runstate.AuditEvent, 3), 4)
	for i, e := range got {
		if e.Seq != int64(5+i) {
			t.Fatalf("event %d numbered %d, want %d", i, e.Seq, 5+i)
		}
	}
}
