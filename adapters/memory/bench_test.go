package memory_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

// baseline is the least a correct in-memory CAS store must do per update:
// lock, check the version, change the snapshot, append an audit event.
type baseline struct {
	mu   sync.Mutex
	runs map[string]*baseRun
}

type baseRun struct {
	snap   runstate.RunSnapshot
	events []runstate.AuditEvent
}

// update returns a copy of the new snapshot, as the contract requires of
// every store (callers must not share the stored value).
func (b *baseline) update(id string, expected int64, st runstate.RunStatus, msg string) (runstate.RunSnapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.runs[id]
	if !ok {
		return runstate.RunSnapshot{}, runstate.ErrNotFound
	}
	if r.snap.Version != expected {
		return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeVersionConflict, RunID: id, ExpectedVersion: expected, CurrentVersion: r.snap.Version}
	}
	from := r.snap.Status
	r.snap.Status, r.snap.Message = st, msg
	r.snap.Version++
	r.snap.UpdatedAt = time.Now()
	r.events = append(r.events, runstate.AuditEvent{RunID: id, Seq: int64(len(r.events) + 1), Kind: runstate.AuditTransition,
		From: from, To: st, Time: r.snap.UpdatedAt, Version: r.snap.Version})
	return r.snap.Clone(), nil
}

// BenchmarkUpdateRun compares the adapter's full UpdateRun (validation,
// fencing, CAS, transition rules, copy-out) with the baseline, both writing
// a message and an audit event per call on runs with 4 steps of 8 hosts.
func BenchmarkUpdateRun(b *testing.B) {
	ctx := context.Background()
	steps := make([]runstate.StepSpec, 4)
	for i := range steps {
		steps[i] = runstate.StepSpec{Name: fmt.Sprintf("step-%d", i)}
		for h := range 8 {
			steps[i].Hosts = append(steps[i].Hosts, fmt.Sprintf("host-%d", h))
		}
	}
	// Alternate between two statuses so each write is also a transition,
	// from wherever the last round (-count) left the run.
	next := func(from runstate.RunStatus) runstate.RunStatus {
		if from == runstate.StatusRunning {
			return runstate.StatusWaiting
		}
		return runstate.StatusRunning
	}
	s := memorytest.Open(b, nil)
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench", Steps: steps})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("adapter", func(b *testing.B) {
		msg := "progress"
		b.ReportAllocs()
		for b.Loop() {
			run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(next(run.Status)), Message: &msg})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline", func(b *testing.B) {
		first := run.Clone()
		first.Status, first.Version = runstate.StatusQueued, 1
		base := &baseline{runs: map[string]*baseRun{run.RunID: {snap: first}}}
		snap := first
		b.ReportAllocs()
		for b.Loop() {
			if snap, err = base.update(run.RunID, snap.Version, next(snap.Status), "progress"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkClaimNext measures claim-next over 1000 queued runs with 1 and 8
// concurrent workers.
func BenchmarkClaimNext(b *testing.B) {
	ctx := context.Background()
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			s := memorytest.Open(b, nil)
			for i := range 1000 {
				if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench", Priority: i % 10}); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(workers)
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				// Distinct workers: incarnations of one worker take over each other's leases.
				owner := runstate.Owner{Worker: fmt.Sprintf("bench-%d", next.Add(1)), Incarnation: "1"}
				for pb.Next() {
					cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Minute})
					if err != nil {
						b.Fatal(err)
					}
					if err := s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: cl.Run.RunID, Token: cl.Lease.Token}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkParkedRuns: claim-next and a runnable page with none and with
// 10,000 runs parked for signals and timers (benchutil.BenchParked): the
// parked index keeps them out of both.
func BenchmarkParkedRuns(b *testing.B) {
	benchutil.BenchParked(b, func(b *testing.B) runstate.Store { return memorytest.Open(b, nil) }, 10000)
}
