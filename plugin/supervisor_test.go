package plugin

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol"
)

// fakeProcess stands for a plugin process: it dies when the test says so.
type fakeProcess struct{ exited, released atomic.Bool }

func (p *fakeProcess) Exited() bool                             { return p.exited.Load() }
func (p *fakeProcess) Kill()                                    { p.released.Store(true); p.exited.Store(true) }
func (p *fakeProcess) ReattachConfig() *goplugin.ReattachConfig { return nil }

// fakeLauncher starts fake processes for a supervisor, the first one too.
type fakeLauncher struct {
	sp *supervisor
	// start, when set, decides start n (0 is the first): an error, or a
	// session to change before it is returned.
	start func(n int, s *session) error

	mu     sync.Mutex
	starts []time.Time
	procs  []*fakeProcess
}

func (l *fakeLauncher) launch(ctx context.Context) (*session, error) {
	l.mu.Lock()
	n := len(l.starts)
	l.starts = append(l.starts, time.Now())
	p := &fakeProcess{}
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	s := l.sp.newSession(nil, p)
	s.opened = protocol.StoreInfo{Leases: true, Features: []string{protocol.FeatureLeases, protocol.FeatureLeaseReader}}
	if l.start != nil {
		if err := l.start(n, s); err != nil {
			s.kill()
			return nil, err
		}
	}
	return s, nil
}

func (l *fakeLauncher) proc(n int) *fakeProcess {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.procs[n]
}

func (l *fakeLauncher) startTimes() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time{}, l.starts...)
}

// logRecorder keeps the pause of every relaunch the supervisor announces
// and counts its errors.
type logRecorder struct {
	mu     sync.Mutex
	pauses []time.Duration
	errors int
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "in" {
			r.pauses = append(r.pauses, a.Value.Duration())
		}
		return true
	})
	if rec.Level == slog.LevelError {
		r.errors++
	}
	return nil
}

func (r *logRecorder) announced() ([]time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration{}, r.pauses...), r.errors
}

// startSupervised returns a supervisor serving its first fake process,
// relaunching after pause. Tests run in a synctest bubble: time is fake,
// so that pauses are exact and sleeping through them takes no time.
func startSupervised(t *testing.T, pause time.Duration, start func(n int, s *session) error) (*supervisor, *fakeLauncher, *logRecorder) {
	t.Helper()
	log := &logRecorder{}
	sp := newSupervisor("plugin test", slog.New(log))
	l := &fakeLauncher{sp: sp, start: start}
	sp.relaunchWith(relaunchPolicy{launch: l.launch, pause: pause, startTimeout: time.Second})
	first, err := l.launch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sp.begin(first)
	t.Cleanup(sp.close)
	return sp, l, log
}

// after lets d of fake time pass and every goroutine of the bubble settle.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// watchTick is long enough for a watch to see a process exit.
const watchTick = 25 * time.Millisecond

func (sp *supervisor) stateNow() supervisorState {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.state
}

// inUse returns the session in use, failing unless the supervisor serves.
func inUse(t *testing.T, sp *supervisor) *session {
	t.Helper()
	s, err := sp.current()
	if err != nil {
		t.Fatalf("not serving: %v", err)
	}
	return s
}

func TestSupervisorStartsADeadProcessAgainAndReleasesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp, l, _ := startSupervised(t, 50*time.Millisecond, nil)
		l.proc(0).exited.Store(true)
		after(watchTick)
		if _, err := sp.current(); !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "being started again") {
			t.Fatalf("a call while relaunching: %v", err)
		}
		after(50 * time.Millisecond)
		if s := inUse(t, sp); s.proc != l.proc(1) {
			t.Fatal("the process started again is not in use")
		}
		if !l.proc(0).released.Load() {
			t.Fatal("go-plugin's client of the dead process was not released")
		}
	})
}

func TestSupervisorBacksOffAcrossCrashes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pause = 10 * time.Millisecond
		sp, l, log := startSupervised(t, pause, func(n int, _ *session) error {
			if n >= 1 && n <= 3 {
				return runstate.Unavailable("the plugin did not start", nil)
			}
			return nil
		})
		l.proc(0).exited.Store(true)
		after(watchTick + 15*pause) // 1+2+4+8 pauses: three failed starts, then one that opens
		inUse(t, sp)
		starts := l.startTimes()
		for i := 2; i < len(starts); i++ {
			if gap, want := starts[i].Sub(starts[i-1]), pause<<(i-1); gap != want {
				t.Errorf("start %d came %v after the one before, want %v", i, gap, want)
			}
		}
		// A process that dies soon after starting is a crash loop: the
		// pause goes on doubling. One that lived a minute starts afresh.
		l.proc(4).exited.Store(true)
		after(watchTick + 16*pause)
		third := inUse(t, sp)
		sp.mu.Lock()
		third.began = time.Now().Add(-2 * time.Minute)
		sp.mu.Unlock()
		l.proc(5).exited.Store(true)
		after(watchTick + pause)
		if s := inUse(t, sp); s.proc != l.proc(6) {
			t.Fatal("the process that lived a minute was not replaced after the first pause")
		}
		pauses, failures := log.announced()
		if want := []time.Duration{pause, 16 * pause, pause}; !slices.Equal(pauses, want) {
			t.Errorf("the pauses announced were %v, want %v", pauses, want)
		}
		if failures != 3 {
			t.Errorf("%d failed starts logged, want 3", failures)
		}
	})
}

func TestSupervisorStartsNothingAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp, l, _ := startSupervised(t, 100*time.Millisecond, nil)
		l.proc(0).exited.Store(true)
		after(watchTick)
		if sp.stateNow() != relaunching {
			t.Fatalf("%s after the death, want relaunching", sp.stateNow())
		}
		sp.close()
		after(time.Second)
		if n := len(l.startTimes()); n != 1 {
			t.Fatalf("%d processes started, the one before Close included", n)
		}
		if _, err := sp.current(); !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "is closed") {
			t.Fatalf("a call after Close: %v", err)
		}
		if !l.proc(0).released.Load() {
			t.Fatal("Close did not release the dead process's client")
		}
	})
}

func TestSupervisorDropsAProcessStartedWhileClosing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		sp, l, _ := startSupervised(t, time.Millisecond, func(n int, _ *session) error {
			if n == 1 {
				<-release // a start that ignores its context
			}
			return nil
		})
		first := inUse(t, sp)
		l.proc(0).exited.Store(true)
		after(watchTick)
		closeDone := make(chan struct{})
		go func() { sp.close(); close(closeDone) }()
		synctest.Wait()
		if sp.stateNow() != closed {
			t.Fatalf("%s while Close waits for the start, want closed", sp.stateNow())
		}
		close(release)
		<-closeDone
		if !l.proc(1).released.Load() {
			t.Fatal("the process started while closing was left running")
		}
		sp.mu.Lock()
		cur := sp.cur
		sp.mu.Unlock()
		if cur != first {
			t.Fatal("the process started while closing was put in use")
		}
	})
}

func TestSupervisorRetriesARelaunchThatFailsToOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp, l, log := startSupervised(t, time.Millisecond, func(n int, s *session) error {
			switch n {
			case 1: // a store of another kind: refused
				s.opened.Features = slices.DeleteFunc(slices.Clone(s.opened.Features), func(f string) bool { return f == protocol.FeatureLeases })
			case 2: // a store with other batch calls: refused too
				s.opened.Features = append(slices.Clone(s.opened.Features), protocol.FeatureBatchCreate)
			case 3:
				return runstate.InvalidArgument("dir", "is locked")
			}
			return nil
		})
		l.proc(0).exited.Store(true)
		after(watchTick + 15*time.Millisecond)
		if s := inUse(t, sp); s.proc != l.proc(4) {
			t.Fatal("a process that failed to open was put in use")
		}
		if !l.proc(1).released.Load() || !l.proc(2).released.Load() || !l.proc(3).released.Load() {
			t.Fatal("a process that failed to open was left running")
		}
		if _, failures := log.announced(); failures != 3 {
			t.Fatalf("%d failed starts logged, want 3", failures)
		}
	})
}

func TestSupervisorStartsAnotherWhenARelaunchedProcessDiesBeforeUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp, l, _ := startSupervised(t, time.Millisecond, func(n int, s *session) error {
			if n == 1 {
				s.proc.(*fakeProcess).exited.Store(true)
				time.Sleep(watchTick) // its watch sees the death before it is in use
			}
			return nil
		})
		l.proc(0).exited.Store(true)
		after(2*watchTick + 3*time.Millisecond)
		if s := inUse(t, sp); s.proc != l.proc(2) || !l.proc(1).released.Load() {
			t.Fatal("a process that died before use was not replaced and released")
		}
	})
}

func TestSupervisorStartsAFirstProcessThatDiedBeforeUseAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := newSupervisor("plugin test", slog.New(slog.DiscardHandler))
		t.Cleanup(sp.close)
		l := &fakeLauncher{sp: sp}
		sp.relaunchWith(relaunchPolicy{launch: l.launch, pause: time.Millisecond, startTimeout: time.Second})
		first, _ := l.launch(context.Background())
		l.proc(0).exited.Store(true)
		after(watchTick)
		sp.begin(first)
		after(time.Millisecond)
		if s := inUse(t, sp); s.proc != l.proc(1) {
			t.Fatal("the first process, dead before use, was not replaced")
		}
	})
}

func TestSupervisorWithoutRelaunchGoesDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := newSupervisor("plugin test", slog.New(slog.DiscardHandler))
		t.Cleanup(sp.close)
		p := &fakeProcess{}
		sp.begin(sp.newSession(nil, p))
		p.exited.Store(true)
		after(watchTick)
		if _, err := sp.current(); sp.stateNow() != down || !strings.HasSuffix(err.Error(), "has exited") {
			t.Fatalf("%s after the death, a call: %v", sp.stateNow(), err)
		}
	})
}

func TestSupervisorRefusesMovesOutsideItsTable(t *testing.T) {
	sp := newSupervisor("plugin test", slog.New(slog.DiscardHandler))
	defer sp.close()
	sp.state = down
	defer func() {
		if recover() == nil {
			t.Fatal("down → serving was allowed")
		}
	}()
	sp.moveTo(serving)
}

// A relaunch whose start fails says why in every call meanwhile: the
// plugin's own error, not only that it is being started again.
func TestSupervisorCallsSayWhyTheLastStartFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		openFails := errors.New("open: the database refused the password")
		sp, l, _ := startSupervised(t, 50*time.Millisecond, func(n int, s *session) error {
			if n == 1 {
				return openFails
			}
			return nil
		})
		l.proc(0).exited.Store(true)
		after(watchTick + 50*time.Millisecond) // the death, then the start that fails
		_, err := sp.current()
		if !errors.Is(err, runstate.ErrUnavailable) || !errors.Is(err, openFails) || !strings.Contains(err.Error(), "refused the password") {
			t.Fatalf("a call after a failed start: %v, want the start's error in it", err)
		}
		after(100 * time.Millisecond) // the next start serves
		inUse(t, sp)
		l.proc(2).exited.Store(true)
		after(watchTick)
		if _, err := sp.current(); strings.Contains(err.Error(), "refused the password") {
			t.Fatalf("a call after a later death repeats an old start's error: %v", err)
		}
	})
}

// A failed start quotes the plugin's last lines of output, which go-plugin
// logs through a named logger; the host's own lines are not quoted, nor
// are those of go-plugin's stdio stream, also named, which read as if the
// plugin lacked a method ("received EOF … Method not found!").
func TestFailedStartQuotesThePluginsOutput(t *testing.T) {
	h := newHCLogger(slog.New(slog.DiscardHandler))
	h.Info("starting plugin")
	named := h.Named("store-plugin")
	for i := range tailLines + 2 {
		named.Error("open failed", "attempt", i)
	}
	stdio := h.Named("stdio")
	stdio.Trace("waiting for stdio data")
	stdio.Debug("received EOF, stopping recv loop", "err", "rpc error: code = Unimplemented desc = Method not found!")
	cause := runstate.Unavailable("open refused", nil)
	err := h.output.explain(cause)
	if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "open failed attempt=6") ||
		strings.Contains(err.Error(), "attempt=1 ") || strings.Contains(err.Error(), "starting plugin") ||
		strings.Contains(err.Error(), "stdio") || strings.Contains(err.Error(), "Method not found") {
		t.Fatalf("%v", err)
	}
}
