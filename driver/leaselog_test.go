package driver_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
)

// The kit logs every lease decision that committed, with the store's times,
// and nothing for a decision it refused.
func TestEveryCommittedLeaseDecisionIsLoggedWithTheStoresTimes(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	clock := conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := memory.Open(ctx, memory.Options{Clock: clock, Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	a := runstate.Owner{Worker: "a", Incarnation: "1"}
	b := runstate.Owner{Worker: "b", Incarnation: "1"}
	r1, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	r2, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	cl, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: r1.RunID, Owner: a, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if _, err := s.RenewLease(ctx, runstate.RenewLeaseParams{RunID: r1.RunID, Token: cl.Lease.Token, TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Refused decisions write nothing and log nothing.
	s.RenewLease(ctx, runstate.RenewLeaseParams{RunID: r1.RunID, Token: 9, TTL: time.Second})
	s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: r1.RunID, Owner: b, TTL: time.Second})
	clock.Advance(3 * time.Second)
	taken, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: b, TTL: time.Minute, Filter: runstate.RunnableFilter{Statuses: []string{"queued"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: taken.Run.RunID, Token: taken.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	batch, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: a, TTL: time.Minute, Max: 2, Start: true})
	if err != nil || len(batch.Claims) != 2 {
		t.Fatalf("claim-runs: %+v, %v", batch, err)
	}
	c2 := batch.Claims[1]
	if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: c2.Run.RunID, ExpectedVersion: c2.Run.Version, LeaseToken: c2.Lease.Token,
		Status: "success", ReleaseLease: true}); err != nil {
		t.Fatal(err)
	}

	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		_, rest, _ := strings.Cut(line, "msg=")
		got = append(got, rest)
	}
	at := func(d time.Duration) string {
		return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Add(d).Format(time.RFC3339Nano)
	}
	want := []string{
		`"lease claimed" run_id=` + r1.RunID + ` token=1 owner=a/1 acquired_at=` + at(0) + ` expires_at=` + at(2*time.Second),
		`"lease renewed" run_id=` + r1.RunID + ` token=1 owner=a/1 acquired_at=` + at(0) + ` expires_at=` + at(3*time.Second),
		// A claim names the lease it ended, as its write read it.
		`"lease claimed" run_id=` + taken.Run.RunID + ` token=2 owner=b/1 acquired_at=` + at(4*time.Second) + ` expires_at=` + at(64*time.Second) +
			` ended_token=1 ended_owner=a/1 ended_expires_at=` + at(3*time.Second) + ` ended_released=false`,
		`"lease released" run_id=` + taken.Run.RunID + ` token=2`,
		`"lease claimed" run_id=` + batch.Claims[0].Run.RunID + ` token=3 owner=a/1 acquired_at=` + at(4*time.Second) + ` expires_at=` + at(64*time.Second) +
			` ended_token=2 ended_owner=b/1 ended_expires_at=` + at(64*time.Second) + ` ended_released=true`,
		`"lease claimed" run_id=` + c2.Run.RunID + ` token=1 owner=a/1 acquired_at=` + at(4*time.Second) + ` expires_at=` + at(64*time.Second),
		`"lease released" run_id=` + c2.Run.RunID + ` token=1`,
	}
	if taken.Run.RunID != r1.RunID || c2.Run.RunID != r2.RunID {
		t.Fatalf("claims took %s and %s, want %s (its lease expired) and then %s", taken.Run.RunID, c2.Run.RunID, r1.RunID, r2.RunID)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lease lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
