package protocol

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/protocol/pb"
)

// Fuzz targets for the wire: whatever the contract accepts crosses the
// process boundary and arrives as it left, and an error keeps its identity.

// wire marshals m and unmarshals it into a fresh message of the same type,
// as the plugin's gRPC transport does.
func wire[M proto.Message](t *testing.T, m M, fresh M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("a request the contract accepts cannot be sent: %v", err)
	}
	if err := proto.Unmarshal(b, fresh); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return fresh
}

// capture records the input a store receives through the kit's checks.
type capture struct {
	runstate.RunStateStore
	create *runstate.CreateRunParams
	update *runstate.UpdateRunParams
}

func (c capture) CreateRun(_ context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	*c.create = p
	return runstate.RunSnapshot{}, nil
}

func (c capture) UpdateRun(_ context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	*c.update = p
	return runstate.RunSnapshot{}, nil
}

// checkedCreate returns p as a store receives it through the kit's checks,
// and whether they accept it: what the client sends.
func checkedCreate(p runstate.CreateRunParams) (runstate.CreateRunParams, bool) {
	var got runstate.CreateRunParams
	_, err := driver.Checked(capture{create: &got}).CreateRun(context.Background(), p)
	return got, err == nil
}

func checkedUpdate(p runstate.UpdateRunParams) (runstate.UpdateRunParams, bool) {
	var got runstate.UpdateRunParams
	_, err := driver.Checked(capture{update: &got}).UpdateRun(context.Background(), p)
	return got, err == nil
}

// stoppedClock tells the time it is set to.
type stoppedClock struct{ now *time.Time }

func (c stoppedClock) Now() time.Time { return *c.now }

// FuzzCreateOverTheWire: a create the contract accepts arrives unchanged.
func FuzzCreateOverTheWire(f *testing.F) {
	f.Add("run-1", "deploy", "", "hello", 0, "env", "prod", "build", "web-1", "ship it", "operator", "alice", "")
	f.Add("", "w", "queued", "", -1000000, "", "", "", "", "", "", "", "run-0")
	f.Add("é", "wf é", "pending", strings.Repeat("ü", 100), 1000000, "k", "", "s", "", "r", "worker", "w-1", "x")
	f.Fuzz(func(t *testing.T, runID, workflow, status, message string, priority int, labelKey, labelValue, step, host, reason, actorKind, actorID, retryOf string) {
		p := runstate.CreateRunParams{RunID: runID, WorkflowName: workflow, Status: status, Message: message, Priority: priority,
			Reason: reason, RetryOf: retryOf, Actor: runstate.Actor{Kind: runstate.ActorKind(actorKind), ID: actorID}}
		if labelKey != "" || labelValue != "" {
			p.Labels = map[string]string{labelKey: labelValue}
		}
		if step != "" {
			p.Steps = []runstate.StepSpec{{Name: step}}
			if host != "" {
				p.Steps[0].Hosts = []string{host}
			}
		}
		p, ok := checkedCreate(p)
		if !ok {
			return // refused before it is sent: the client checks first
		}
		got := fromCreate(wire(t, createPB(p), &pb.CreateRunRequest{}))
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("create changed on the wire:\nsent %#v\ngot  %#v", p, got)
		}
	})
}

// FuzzUpdateOverTheWire: an update the contract accepts arrives unchanged,
// including the difference between an absent field and an empty one.
func FuzzUpdateOverTheWire(f *testing.F) {
	f.Add("r", int64(3), int64(0), "running", true, "m", true, 5, 0, "", "", "s", "succeeded", "h", "", "o", "e", "", "", "")
	f.Add("r", int64(1), int64(7), "failed", false, "", false, 0, 2, "E_X", "it broke", "", "", "", "", "", "", "k", "v", "")
	f.Add("r", int64(9), int64(0), "interrupted", true, "", true, 0, 1, "", "", "", "", "", "", "", "", "", "", "worker lost")
	f.Add("r", int64(2), int64(0), "", true, "", false, 0, 0, "", "", "st", "", "h1", "running", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, runID string, version, token int64, status string, setMessage bool, message string, setPriority bool, priority int,
		labels int, errorCode, diagMessage, step, stepStatus, host, hostStatus, output, hostErr, labelKey, labelValue, interrupted string) {
		p := runstate.UpdateRunParams{RunID: runID, ExpectedVersion: version, LeaseToken: token, Status: status, InterruptedReason: interrupted,
			Actor: runstate.Actor{Kind: runstate.ActorWorker, ID: "w"}}
		if setMessage {
			p.Message = &message
		}
		if setPriority {
			p.Priority = &priority
		}
		switch labels % 3 {
		case 1:
			p.Labels = map[string]string{} // clear every label
		case 2:
			p.Labels = map[string]string{labelKey: labelValue}
		}
		if errorCode != "" || diagMessage != "" {
			p.Diagnostic = &runstate.Diagnostic{ErrorCode: errorCode, Message: diagMessage, SourceStep: step, SourceHost: host}
			if labelKey != "" {
				p.Diagnostic.Details = map[string]string{labelKey: labelValue}
			}
		}
		if step != "" {
			sp := runstate.StepPatch{Name: step, Status: stepStatus}
			if host != "" {
				hp := runstate.HostPatch{Host: host, Status: hostStatus}
				if output != "" {
					hp.OutputSummary = &output
				}
				if hostErr != "" {
					hp.Error = &hostErr
				}
				sp.Hosts = []runstate.HostPatch{hp}
			}
			p.Steps = []runstate.StepPatch{sp}
		}
		p, ok := checkedUpdate(p)
		if !ok {
			return
		}
		got := fromUpdate(wire(t, updatePB(p), &pb.UpdateRunRequest{}))
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("update changed on the wire:\nsent %#v\ngot  %#v", p, got)
		}
	})
}

// FuzzSnapshotOverTheWire drives a run through updates decoded from the
// input and checks that every snapshot and audit event the contract
// produces on the way arrives unchanged.
func FuzzSnapshotOverTheWire(f *testing.F) {
	f.Add([]byte{0, 1, 3, 4, 1, 5, 2, 7}, "deploy", "hello")
	f.Add([]byte{0, 8, 1, 2, 3, 3}, "é", "")
	f.Add([]byte{1, 6, 0, 0}, "w", strings.Repeat("x", 300))
	f.Fuzz(func(t *testing.T, script []byte, workflow, message string) {
		now := time.Date(2031, 2, 3, 4, 5, 6, 789000, time.UTC)
		ctx := context.Background()
		store, err := memory.Open(ctx, memory.Options{Clock: stoppedClock{&now}})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		create := runstate.CreateRunParams{RunID: "r", WorkflowName: workflow, Message: message,
			Labels: map[string]string{"env": workflow}, Steps: []runstate.StepSpec{{Name: "s", Hosts: []string{"h1", "h2"}}}}
		run, err := store.CreateRun(ctx, create)
		if err != nil {
			return
		}
		// newEvents returns the events written since the last call.
		var seen int64
		newEvents := func() []runstate.AuditEvent {
			page, err := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: "r", AfterSeq: seen, Limit: runstate.MaxPageLimit})
			if err != nil {
				t.Fatal(err)
			}
			seen += int64(len(page.Events))
			return page.Events
		}
		check := func(run runstate.RunSnapshot, events []runstate.AuditEvent) {
			if got := fromRun(wire(t, runPB(run), &pb.Run{})); !reflect.DeepEqual(got, run) {
				t.Fatalf("snapshot changed on the wire:\nsent %#v\ngot  %#v", run, got)
			}
			for _, e := range events {
				if got := fromEvent(wire(t, eventPB(e), &pb.AuditEvent{})); !reflect.DeepEqual(got, e) {
					t.Fatalf("event changed on the wire:\nsent %#v\ngot  %#v", e, got)
				}
			}
			claim := runstate.Claim{Run: run, Lease: runstate.Lease{RunID: run.RunID, Owner: runstate.Owner{Worker: "w", Incarnation: "i"},
				Token: 4, AcquiredAt: now, ExpiresAt: now.Add(time.Minute)}}
			if got := fromClaim(wire(t, claimPB(claim), &pb.Claim{})); !reflect.DeepEqual(got, claim) {
				t.Fatalf("claim changed on the wire:\nsent %#v\ngot  %#v", claim, got)
			}
		}
		check(run, newEvents())
		statuses := runstate.RunStatuses()
		steps := runstate.StepStatuses()
		for i := 0; i+1 < len(script); i += 2 {
			now = now.Add(time.Millisecond)
			op, arg := script[i], script[i+1]
			p := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Actor: runstate.Actor{Kind: runstate.ActorWorker, ID: "w"}}
			switch op % 3 {
			case 0:
				to := statuses[int(arg)%len(statuses)]
				p.Status = string(to)
				if to.RequiresDiagnostic() {
					p.Diagnostic = &runstate.Diagnostic{ErrorCode: "E", Message: message, Retryable: arg%2 == 0,
						SourceStep: "s", Details: map[string]string{"k": workflow}}
				}
				if to == runstate.StatusInterrupted {
					p.InterruptedReason = "lost"
				}
			case 1:
				out, errText := message, workflow
				p.Steps = []runstate.StepPatch{{Name: "s", Hosts: []runstate.HostPatch{{Host: "h1",
					Status: string(steps[int(arg)%len(steps)]), OutputSummary: &out, Error: &errText}}}}
			case 2:
				prio := int(arg) - 128
				p.Priority = &prio
				p.Labels = map[string]string{}
			}
			if _, err := store.UpdateRun(ctx, p); errors.Is(err, runstate.ErrInvalidArgument) {
				continue
			}
			if run, err = store.GetRun(ctx, "r"); err != nil {
				t.Fatal(err)
			}
			check(run, newEvents())
		}
	})
}

// FuzzErrorOverTheWire: a store's error keeps its identity and every
// field across the boundary, whatever text it carries: bytes that are not
// UTF-8 are replaced, never the reason the error is lost or read as success.
func FuzzErrorOverTheWire(f *testing.F) {
	f.Add(0, "no such run", "r", "", "", "", "", "", int64(0), int64(0), "")
	f.Add(2, "stale", "r", "", "", "", "", "", int64(3), int64(5), "")
	f.Add(3, "forbidden", "r", "", "succeeded", "running", "s", "h", int64(0), int64(0), "")
	f.Add(5, "bad", "", "run_id", "", "", "", "", int64(0), int64(0), "")
	f.Add(9, "Duplicate entry '\xff' for key", "r\xfe", "", "", "", "", "", int64(0), int64(0), "driver: \xc3")
	f.Add(-1, "a driver's own error \xff", "", "", "", "", "", "", int64(0), int64(0), "")
	f.Fuzz(func(t *testing.T, code int, message, runID, field, from, to, step, host string, expected, current int64, cause string) {
		var sent error
		var want *runstate.Error
		if code >= 0 {
			codes := slices.Sorted(maps.Keys(grpcCodes))
			e := &runstate.Error{Code: codes[code%len(codes)], Message: message, RunID: runID, Field: field, From: from, To: to,
				Step: step, Host: host, ExpectedVersion: expected, CurrentVersion: current}
			if cause != "" {
				e.Cause = errors.New(cause)
			}
			sent = e
			want = &runstate.Error{Code: e.Code, Message: wireText(message), RunID: wireText(runID), Field: wireText(field),
				From: wireText(from), To: wireText(to), Step: wireText(step), Host: wireText(host),
				ExpectedVersion: expected, CurrentVersion: current}
		} else {
			sent = errors.New(message) // not a contract error
		}
		got := fromStatus(overTheWire(t, toStatus(sent)), "plugin", func() bool { return false })
		if got == nil {
			t.Fatalf("%q arrived as success", sent)
		}
		if want == nil {
			if runstate.CodeOf(got) != "" || !strings.Contains(got.Error(), wireText(message)) {
				t.Fatalf("%q arrived as %v", sent, got)
			}
			return
		}
		var e *runstate.Error
		if !errors.As(got, &e) || !errors.Is(got, &runstate.Error{Code: want.Code}) {
			t.Fatalf("%v lost its identity: %#v", sent, got)
		}
		if (e.Cause != nil) != (cause != "") || e.Cause != nil && e.Cause.Error() != wireText(cause) {
			t.Fatalf("cause %q arrived as %v", cause, e.Cause)
		}
		e.Cause = nil
		if !reflect.DeepEqual(e, want) {
			t.Fatalf("error changed on the wire:\nsent %#v\ngot  %#v", want, e)
		}
	})
}

// overTheWire sends a gRPC status error as the transport does: marshalled
// into its status message and rebuilt on the other side.
func overTheWire(t *testing.T, err error) error {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a gRPC status", err)
	}
	return status.FromProto(wire(t, st.Proto(), &spb.Status{})).Err()
}

// A store may return a sentinel itself, bare or wrapped: it keeps its
// identity over the wire like a detailed error.
func TestBareSentinelsKeepTheirIdentityOverTheWire(t *testing.T) {
	for _, tc := range []struct{ sent, sentinel error }{
		{runstate.ErrNotFound, runstate.ErrNotFound},
		{fmt.Errorf("no run r1: %w", runstate.ErrNotFound), runstate.ErrNotFound},
		{runstate.ErrLeaseLost, runstate.ErrLeaseLost},
	} {
		sent := tc.sent
		got := fromStatus(overTheWire(t, toStatus(sent)), "plugin", func() bool { return false })
		if !errors.Is(got, tc.sentinel) || runstate.CodeOf(got) != runstate.CodeOf(tc.sentinel) {
			t.Errorf("%v arrived as %v (code %q)", sent, got, runstate.CodeOf(got))
		}
		if strings.Contains(got.Error(), "runstate: runstate:") {
			t.Errorf("%v arrived with a doubled prefix: %v", sent, got)
		}
	}
}
