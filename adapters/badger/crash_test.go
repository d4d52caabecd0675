package badger_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/badger/badgertest"
)

// The crash test runs this test binary again as a child (crashChildEnv set
// to the data directory). The child performs transitions for ever and
// prints one line per acknowledged write: "ack <run_id> <version> <status>".
const crashChildEnv = "RUNSTATE_BADGER_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		if err := crashChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func openForCrash(ctx context.Context, dir string) (*badger.Store, error) {
	return badger.Open(ctx, badger.Options{Dir: dir, Tune: badgertest.Small, GCInterval: -1, Logger: slog.New(slog.DiscardHandler)})
}

func crashChild(dir string) error {
	ctx := context.Background()
	s, err := openForCrash(ctx, dir)
	if err != nil {
		return err
	}
	// Continue the runs earlier children left unfinished, and start new ones.
	var live []runstate.RunSnapshot
	page, err := s.ListRuns(ctx, runstate.ListRunsParams{Statuses: []string{"queued", "running", "waiting"}, Limit: runstate.MaxPageLimit})
	if err != nil {
		return err
	}
	live = page.Runs
	ack := func(r runstate.RunSnapshot) {
		// Written only after the store returned: the write is acknowledged.
		fmt.Fprintf(os.Stdout, "ack %s %d %s\n", r.RunID, r.Version, r.Status)
	}
	for {
		if len(live) < 8 || rand.IntN(4) == 0 {
			r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "crash", Priority: rand.IntN(5),
				Steps: []runstate.StepSpec{{Name: "work", Hosts: []string{"h1", "h2"}}}})
			if err != nil {
				return err
			}
			ack(r)
			live = append(live, r)
			continue
		}
		i := rand.IntN(len(live))
		run := live[i]
		var next []runstate.RunStatus
		for _, to := range runstate.RunStatuses() {
			if runstate.CanTransition(run.Status, to) {
				next = append(next, to)
			}
		}
		to := next[rand.IntN(len(next))]
		p := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(to), Actor: runstate.Actor{Kind: runstate.ActorWorker, ID: "crash"}}
		if to.RequiresDiagnostic() {
			p.Diagnostic = &runstate.Diagnostic{ErrorCode: "E_CRASH", Message: "chosen at random", Retryable: true}
		}
		if to == runstate.StatusInterrupted {
			p.InterruptedReason = "CRASH_TEST"
		}
		if to == runstate.StatusRunning {
			p.Steps = []runstate.StepPatch{{Name: "work", Hosts: []runstate.HostPatch{{Host: "h1", OutputSummary: ptr(strings.Repeat("o", rand.IntN(3000)))}}}}
		}
		var token int64
		if rand.IntN(3) == 0 {
			// Work under a lease, as a worker would; the 1ms TTL has run out
			// by the time the parent checks, so the run must be runnable then.
			cl, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "crash", Incarnation: strconv.Itoa(os.Getpid())},
				TTL: time.Millisecond, Statuses: []string{"queued", "running", "waiting"}})
			switch {
			case err == nil:
				token, p.LeaseToken = cl.Lease.Token, cl.Lease.Token
			case !errors.Is(err, runstate.ErrLeaseHeld): // held: our own lease of a moment ago
				return err
			}
		}
		r, err := s.UpdateRun(ctx, p)
		if err != nil {
			return err
		}
		ack(r)
		if token != 0 && rand.IntN(2) == 0 {
			if err := s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: token}); err != nil {
				return err
			}
		}
		if r.Status.Terminal() {
			live = append(live[:i], live[i+1:]...)
		} else {
			live[i] = r
		}
	}
}

func ptr[T any](v T) *T { return &v }

type acked struct {
	version int64
	status  runstate.RunStatus
}

func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	kills := 20
	if n, err := strconv.Atoi(os.Getenv("RUNSTATE_CRASH_KILLS")); err == nil && n > 0 {
		kills = n
	}
	dir := t.TempDir()
	acks := map[string]acked{}
	totalAcks := 0
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// Let the child get going, then kill it at a random point.
		deadline := time.After(time.Duration(30+rand.IntN(250)) * time.Millisecond)
		n := 0
	wait:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("kill %d: child exited on its own: %s", k, stderr.String())
				}
				record(t, acks, l)
				n++
			case <-deadline:
				if n > 0 {
					break wait
				}
				deadline = time.After(50 * time.Millisecond)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for l := range lines { // lines written before the kill were acknowledged too
			record(t, acks, l)
			n++
		}
		_ = cmd.Wait()
		totalAcks += n
		verifyAfterCrash(t, dir, acks)
	}
	t.Logf("%d kills, %d acknowledged writes on %d runs, all present and consistent", kills, totalAcks, len(acks))
}

func record(t *testing.T, acks map[string]acked, line string) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "ack" {
		if strings.TrimSpace(line) != "" {
			t.Logf("child said: %s", line)
		}
		return
	}
	v, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		t.Fatalf("bad ack %q", line)
	}
	if v > acks[f[1]].version {
		acks[f[1]] = acked{v, runstate.RunStatus(f[3])}
	}
}

// verifyAfterCrash reopens the store and checks every acknowledged write,
// each run's version and audit chain, and the status indexes.
func verifyAfterCrash(t *testing.T, dir string, acks map[string]acked) {
	t.Helper()
	ctx := context.Background()
	s, err := openForCrash(ctx, dir)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	for id, a := range acks {
		run, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatalf("acknowledged run %s lost: %v", id, err)
		}
		if run.Version < a.version || (run.Version == a.version && run.Status != a.status) {
			t.Fatalf("run %s: acknowledged version %d (%s), found version %d (%s)", id, a.version, a.status, run.Version, run.Status)
		}
	}
	byStatus := map[runstate.RunStatus]int{}
	all := listAll(t, s, runstate.ListRunsParams{})
	for _, run := range all {
		byStatus[run.Status]++
		page, err := s.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: run.RunID, Limit: runstate.MaxPageLimit})
		if err != nil {
			t.Fatal(err)
		}
		evs := page.Events
		// Every write of the child is a creation or a transition: one event each.
		if int64(len(evs)) != run.Version || evs[len(evs)-1].To != run.Status {
			t.Fatalf("run %s at version %d (%s) has %d audit events: %+v", run.RunID, run.Version, run.Status, len(evs), evs)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || e.Version != int64(i+1) || (i > 0 && e.From != evs[i-1].To) {
				t.Fatalf("run %s: audit chain broken at %d: %+v", run.RunID, i, e)
			}
		}
	}
	for _, st := range runstate.RunStatuses() {
		if got := len(listAll(t, s, runstate.ListRunsParams{Statuses: []string{string(st)}})); got != byStatus[st] {
			t.Fatalf("status index for %s lists %d runs, snapshots say %d", st, got, byStatus[st])
		}
	}
	// Every lease the children took has expired: the claim-order and expiry
	// indexes together must yield exactly the non-terminal runs.
	live := byStatus[runstate.StatusQueued] + byStatus[runstate.StatusRunning] + byStatus[runstate.StatusWaiting]
	runnable := 0
	for cursor := ""; ; {
		page, err := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{Cursor: cursor, Limit: runstate.MaxPageLimit,
			Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running", "waiting"}}})
		if err != nil {
			t.Fatal(err)
		}
		runnable += len(page.Runs)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if runnable != live {
		t.Fatalf("runnable listing yields %d runs, %d are non-terminal and unleased", runnable, live)
	}
}

func listAll(t *testing.T, s *badger.Store, p runstate.ListRunsParams) []runstate.RunSnapshot {
	t.Helper()
	var out []runstate.RunSnapshot
	p.Limit = runstate.MaxPageLimit
	for {
		page, err := s.ListRuns(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Runs...)
		if page.NextCursor == "" {
			return out
		}
		p.Cursor = page.NextCursor
	}
}
