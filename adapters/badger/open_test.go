package badger_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/watchtest"
)

func TestSecondProcessGetsClearError(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() { // the child has the store open once it acknowledges a write
		t.Fatal("child wrote nothing")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	_, err = openForCrash(context.Background(), dir)
	if !errors.Is(err, runstate.ErrUnavailable) || !errors.Is(err, badger.ErrDirectoryInUse) {
		t.Fatalf("opening a directory another process holds: %v", err)
	}
	t.Logf("second process sees: %v", err)
}

func TestSameProcessSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := openForCrash(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := openForCrash(context.Background(), dir); !errors.Is(err, runstate.ErrUnavailable) {
		t.Fatalf("second open in one process: %v", err)
	}
}

func TestHistorySurvivesReopenAndCloseIsFinal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := openForCrash(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "w"}, TTL: 60e9, Statuses: []string{"running"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = s.GetRun(ctx, run.RunID)
	if !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("GetRun after Close: %v", err)
	}
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"}); !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("CreateRun after Close: %v", err)
	}

	s, err = openForCrash(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetRun(ctx, run.RunID)
	if err != nil || got.Version != run.Version || got.Status != runstate.StatusRunning {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	// The lease survives too: another worker still cannot claim the run.
	_, err = s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "other"}, TTL: 60e9, Statuses: []string{"running"}})
	if !errors.Is(err, runstate.ErrLeaseHeld) {
		t.Errorf("claim after reopen: %v", err)
	}
	page, err := s.ListRuns(ctx, runstate.ListRunsParams{Labels: map[string]string{"k": "v"}})
	if err != nil || len(page.Runs) != 1 {
		t.Errorf("label index after reopen: %d runs, %v", len(page.Runs), err)
	}
}

func TestOpenNeedsADirectory(t *testing.T) {
	if _, err := badger.Open(context.Background(), badger.Options{}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("Open without a directory: %v", err)
	}
	file := t.TempDir() + "/file"
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openForCrash(context.Background(), file); !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("Open on a regular file: %v", err)
	}
}

func TestValueLogGC(t *testing.T) {
	ctx := context.Background()
	s, err := openForCrash(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf", Steps: []runstate.StepSpec{{Name: "s", Hosts: []string{"h"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite a large snapshot many times so that old values become garbage.
	big := strings.Repeat("x", runstate.MaxHostOutputBytes)
	for i := range 300 {
		out := big[:len(big)-i%7]
		run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version,
			Steps: []runstate.StepPatch{{Name: "s", Hosts: []runstate.HostPatch{{Host: "h", OutputSummary: &out}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.RunValueLogGC(ctx); err != nil {
		t.Fatalf("RunValueLogGC: %v", err)
	}
	if got, err := s.GetRun(ctx, run.RunID); err != nil || got.Version != run.Version {
		t.Fatalf("after GC: %v %v", got.Version, err)
	}
}

// A directory of layout 2, from before parked runs, opens and is moved to
// layout 3, which an older build refuses; a layout it does not know is
// refused, naming it.
func TestALayoutBeforeParkedRunsIsMovedOn(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ stored, after string }{{"2", "3"}, {"99", ""}} {
		dir := t.TempDir()
		db, err := bdb.Open(bdb.DefaultOptions(dir).WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(txn *bdb.Txn) error { return txn.Set([]byte("m\x00schema"), []byte(c.stored)) }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err := badger.Open(ctx, badger.Options{Dir: dir})
		if c.after == "" {
			if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), `"`+c.stored+`"`) {
				t.Errorf("Open on layout %s: %v, want UNAVAILABLE naming it", c.stored, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Open on layout %s: %v", c.stored, err)
		}
		s.Close()
		db, err = bdb.Open(bdb.DefaultOptions(dir).WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		db.View(func(txn *bdb.Txn) error {
			item, err := txn.Get([]byte("m\x00schema"))
			if err == nil {
				got, err = item.ValueCopy(nil)
			}
			return err
		})
		db.Close()
		if string(got) != c.after {
			t.Errorf("layout %s after Open: %q, want %q", c.stored, got, c.after)
		}
	}
}

// A parked run coming due wakes the watchers of runnable runs, as a write
// would, also one parked before the store was opened again.
func TestADueRunWakesTheWatchers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := badger.Open(ctx, badger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	watchtest.DueRunsWakeWatchers(t, s)

	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "due"})
	if err != nil {
		t.Fatal(err)
	}
	due := run.CreatedAt.Add(time.Second)
	if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &due}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = badger.Open(ctx, badger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wake, err := s.WatchRunnable(ctx, runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no notice 10s after a run parked before the store opened came due")
	}
	if time.Now().Before(due) {
		t.Fatalf("woken at %v, before the run came due at %v", time.Now(), due)
	}
}

// Timers coming due at one instant are claimed as the queue would take
// them, by workers racing for them, without a failed claim.
func TestTimersDueTogetherAreClaimedInOrder(t *testing.T) {
	s, err := badger.Open(context.Background(), badger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	benchutil.DueTogether(t, s, 100, 4)
}

// An alarm for a parked run may ring as the store closes: it reads
// nothing from the closed directory (Badger panics on a read of a closed
// database). Runs parked for 0 to 4 ms, closed 0 to 6 ms later.
func TestAnAlarmAsTheStoreClosesReadsNothing(t *testing.T) {
	ctx := context.Background()
	for i := range 40 {
		s, err := badger.Open(ctx, badger.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "due"})
		if err != nil {
			t.Fatal(err)
		}
		due := time.Now().Add(time.Duration(i%5) * time.Millisecond)
		if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &due}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%7) * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // an alarm that rang last has read, or not
}
