package driver

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/runstate/runstate"
)

// Fuzz targets for the contract's logic. Each checks invariants, not only
// that nothing panics: go test runs their seeds; make fuzz explores.

// FuzzPrepareCreate: input is refused with a typed INVALID_ARGUMENT, or
// it is normalised into a valid run whose first snapshot and event are
// what the contract says.
func FuzzPrepareCreate(f *testing.F) {
	f.Add("", "deploy", "", "hello", 0, "env", "prod", "build", "web-1", "ship it")
	f.Add("run-1", "  ", "created", "", 5, "a=b", "v", "", "", "")
	f.Add("x y", "wf\xff", "RUNNING", "m\x00", -2000000, "", "", "s", "s", strings.Repeat("r", 2000))
	f.Add("ok:id.1_-", "wf", "pending", strings.Repeat("é", 3000), 1000000, "k/1", "", " ", "h", "")
	f.Fuzz(func(t *testing.T, runID, workflow, status, message string, priority int, labelKey, labelValue, step, host, reason string) {
		p := runstate.CreateRunParams{RunID: runID, WorkflowName: workflow, Status: status, Message: message, Priority: priority, Reason: reason}
		if labelKey != "" || labelValue != "" {
			p.Labels = map[string]string{labelKey: labelValue}
		}
		if step != "" {
			p.Steps = []runstate.StepSpec{{Name: step, Hosts: []string{host}}}
		}
		err := prepareCreate(&p)
		if err != nil {
			if !errors.Is(err, runstate.ErrInvalidArgument) {
				t.Fatalf("refused with %v, not INVALID_ARGUMENT", err)
			}
			var e *runstate.Error
			if !errors.As(err, &e) || e.Field == "" || e.Message == "" {
				t.Fatalf("an INVALID_ARGUMENT must name its field and say why: %+v", e)
			}
			return
		}
		for _, s := range []string{p.RunID, p.WorkflowName, p.Message, p.Reason} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("accepted text that is not valid UTF-8 without NUL: %q", s)
			}
		}
		if strings.TrimSpace(p.WorkflowName) == "" || len(p.WorkflowName) > runstate.MaxWorkflowNameLen || len(p.Message) > runstate.MaxMessageLen ||
			p.Priority < runstate.MinPriority || p.Priority > runstate.MaxPriority || validateRunID(p.RunID) != nil {
			t.Fatalf("accepted out-of-limit input: %+v", p)
		}
		if p.Status != string(runstate.StatusQueued) || (status != "" && status != "queued" && status != "created" && status != "pending") {
			t.Fatalf("status %q accepted as %q", status, p.Status)
		}
		again := p
		if err := prepareCreate(&again); err != nil || again.RunID != p.RunID {
			t.Fatalf("normalised input refused or changed on a second pass: %v", err)
		}
		now := time.Date(2030, 1, 1, 0, 0, 0, 123456789, time.UTC)
		run, ev, err := newRun(p, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if run.Version != 1 || run.Status != runstate.StatusQueued || run.Attempt != 1 || !run.CreatedAt.Equal(run.UpdatedAt) ||
			run.CreatedAt.Nanosecond()%1000 != 0 || ev.Seq != 1 || ev.Kind != runstate.AuditCreated || ev.Version != 1 || !ev.Time.Equal(run.CreatedAt) {
			t.Fatalf("first snapshot %+v, event %+v", run, ev)
		}
		for _, st := range run.Steps {
			if st.Status != runstate.StepQueued {
				t.Fatalf("declared step not queued: %+v", st)
			}
		}
	})
}

// FuzzApplyUpdate drives a run through a sequence of updates decoded from
// the input and checks after each that the outcome is one the contract
// allows, and that the run stays a valid snapshot.
func FuzzApplyUpdate(f *testing.F) {
	f.Add([]byte{1, 0, 3, 2, 9, 4, 7, 7, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 255, 128, 64})
	f.Add([]byte("running waiting running success failed"))
	f.Fuzz(func(t *testing.T, script []byte) {
		statuses := runstate.RunStatuses()
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		run, _, err := newRun(runstate.CreateRunParams{RunID: "r", WorkflowName: "w", Steps: []runstate.StepSpec{{Name: "s", Hosts: []string{"h"}}}}, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		lease := LeaseState{Token: 3, Owner: runstate.Owner{Worker: "w"}, ExpiresAt: now.Add(time.Hour)}
		for i := 0; i+1 < len(script); i += 2 {
			op, arg := script[i], script[i+1]
			now = now.Add(time.Millisecond)
			p := runstate.UpdateRunParams{RunID: "r", ExpectedVersion: run.Version, Actor: runstate.Actor{Kind: runstate.ActorWorker}}
			switch op % 6 {
			case 0, 1: // a status, with what it needs
				to := statuses[int(arg)%len(statuses)]
				p.Status = string(to)
				if to.RequiresDiagnostic() && arg%3 != 0 {
					p.Diagnostic = &runstate.Diagnostic{ErrorCode: "E", Message: "m"}
				}
				if to == runstate.StatusInterrupted && arg%3 != 0 {
					p.InterruptedReason = "R"
				}
			case 2: // a message
				m := string(rune('a' + arg%26))
				p.Message = &m
			case 3: // a step or host move
				st := runstate.StepStatuses()[int(arg)%len(runstate.StepStatuses())]
				if arg%2 == 0 {
					p.Steps = []runstate.StepPatch{{Name: "s", Status: string(st)}}
				} else {
					p.Steps = []runstate.StepPatch{{Name: "s", Hosts: []runstate.HostPatch{{Host: "h", Status: string(st)}}}}
				}
			case 4: // a stale version
				p.ExpectedVersion = run.Version - 1 - int64(arg%3)
				p.Message = new(string)
			case 5: // a token
				p.LeaseToken = int64(arg % 5)
				p.Message = new(string)
			}
			if err := prepareUpdate(&p); err != nil {
				if !errors.Is(err, runstate.ErrInvalidArgument) {
					t.Fatalf("prepareUpdate: %v", err)
				}
				continue
			}
			out := applyUpdate(run, lease, p, now)
			res, err := out.Result()
			switch {
			case err == nil:
				if !out.Write || res.Version != run.Version+1 || !res.UpdatedAt.Equal(Timestamp(now)) {
					t.Fatalf("an accepted write: %+v from %+v", res, run)
				}
				wantEvents := 0
				if p.Status != "" {
					wantEvents = 1
					if !runstate.CanTransition(run.Status, res.Status) {
						t.Fatalf("accepted %s -> %s", run.Status, res.Status)
					}
				}
				if len(out.Events) != wantEvents {
					t.Fatalf("%d events for %+v", len(out.Events), p)
				}
				// The trail records the very change the write made.
				if wantEvents == 1 {
					e := out.Events[0]
					if e.From != run.Status || e.To != res.Status || e.Version != res.Version || e.LeaseToken != p.LeaseToken {
						t.Fatalf("event %+v for %s -> %s at version %d", e, run.Status, res.Status, res.Version)
					}
				}
			case errors.Is(err, runstate.ErrInvalidTransition) && p.Status != "" && !run.Status.Terminal():
				if !out.Write || out.Snapshot.Status != runstate.StatusFailed || len(out.Events) != 2 || out.Events[0].Version != run.Version {
					t.Fatalf("a forbidden transition of a live run: %+v", out)
				}
			case errors.Is(err, runstate.ErrInvalidTransition) && run.Status.Terminal():
				if out.Write || len(out.Events) != 1 || out.Events[0].Kind != runstate.AuditRejected {
					t.Fatalf("a write to a terminal run: %+v", out)
				}
			default:
				if out.Write || len(out.Events) != 0 {
					t.Fatalf("a refused write (%v) that writes: %+v", err, out)
				}
			}
			if out.Write {
				if out.Snapshot.Version != run.Version+1 {
					t.Fatalf("version %d after %d", out.Snapshot.Version, run.Version)
				}
				run = out.Snapshot
			}
			if run.Status.Terminal() && run.FinishedAt.IsZero() || !run.Status.Terminal() && !run.FinishedAt.IsZero() {
				t.Fatalf("finished_at %v on a %s run", run.FinishedAt, run.Status)
			}
			if (run.Status == runstate.StatusFailed || run.Status == runstate.StatusDenied || run.Status == runstate.StatusTimeout) && run.Diagnostic == nil {
				t.Fatalf("a %s run without a diagnostic", run.Status)
			}
			if run.Status == runstate.StatusInterrupted && strings.TrimSpace(run.InterruptedReason) == "" {
				t.Fatal("an interrupted run without a reason")
			}
		}
	})
}

// FuzzCursors: a cursor is either refused with INVALID_ARGUMENT or one the
// store issued; tampering is never taken for a position.
func FuzzCursors(f *testing.F) {
	f.Add("")
	f.Add("%%%")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("runs.v1|1893456000000000|r1")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("runnable.v1|5|1893456000000000|r1")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("runs.v1|-1|r1|x")))
	f.Fuzz(func(t *testing.T, cursor string) {
		for _, err := range []error{
			func() error { _, err := prepareListRuns(runstate.ListRunsParams{Cursor: cursor}); return err }(),
			func() error { _, err := prepareRunnable(runstate.RunnableFilter{}, 0, cursor); return err }(),
		} {
			if err != nil && !errors.Is(err, runstate.ErrInvalidArgument) {
				t.Fatalf("cursor %q: %v, not INVALID_ARGUMENT", cursor, err)
			}
		}
		if q, err := prepareListRuns(runstate.ListRunsParams{Cursor: cursor}); err == nil && cursor != "" {
			if q.After == nil || q.After.cursor() != cursor {
				t.Fatalf("cursor %q accepted but does not round-trip", cursor)
			}
		}
		if q, err := prepareRunnable(runstate.RunnableFilter{}, 0, cursor); err == nil && cursor != "" {
			if q.After == nil || q.After.cursor() != cursor {
				t.Fatalf("runnable cursor %q accepted but does not round-trip", cursor)
			}
		}
	})
}
