package plugin

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
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
	s.opened = protocol.StoreInfo{Leases: true}
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
// relaunching after pause.
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

func (sp *supervisor) stateNow() supervisorState {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.state
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// servingAnew waits until a process other than old serves.
func servingAnew(t *testing.T, sp *supervisor, old *session) *session {
	t.Helper()
	var cur *session
	waitFor(t, "another process to serve", func() bool {
		s, err := sp.current()
		cur = s
		return err == nil && s != old
	})
	return cur
}

func TestSupervisorStartsADeadProcessAgainAndReleasesIt(t *testing.T) {
	sp, l, _ := startSupervised(t, 50*time.Millisecond, nil)
	first, _ := sp.current()
	l.proc(0).exited.Store(true)
	waitFor(t, "the death to be seen", func() bool { return sp.stateNow() == relaunching })
	if _, err := sp.current(); !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "being started again") {
		t.Fatalf("a call while relaunching: %v", err)
	}
	servingAnew(t, sp, first)
	if !l.proc(0).released.Load() {
		t.Fatal("go-plugin's client of the dead process was not released")
	}
}

func TestSupervisorBacksOffAcrossCrashes(t *testing.T) {
	const pause = 10 * time.Millisecond
	sp, l, log := startSupervised(t, pause, func(n int, _ *session) error {
		if n >= 1 && n <= 3 {
			return runstate.Unavailable("the plugin did not start", nil)
		}
		return nil
	})
	first, _ := sp.current()
	l.proc(0).exited.Store(true)
	second := servingAnew(t, sp, first)
	starts := l.startTimes()
	for i := 2; i < len(starts); i++ {
		want := pause << (i - 1)
		if gap := starts[i].Sub(starts[i-1]); gap < want {
			t.Errorf("start %d came %v after the one before, want at least %v", i, gap, want)
		}
	}
	// A process that dies soon after starting is a crash loop: the pause
	// goes on doubling. One that lived a minute starts afresh.
	l.proc(4).exited.Store(true)
	third := servingAnew(t, sp, second)
	sp.mu.Lock()
	third.began = time.Now().Add(-2 * time.Minute)
	sp.mu.Unlock()
	l.proc(5).exited.Store(true)
	servingAnew(t, sp, third)
	pauses, failures := log.announced()
	if want := []time.Duration{pause, pause << 4, pause}; !equalDurations(pauses, want) {
		t.Errorf("the pauses announced were %v, want %v", pauses, want)
	}
	if failures != 3 {
		t.Errorf("%d failed starts logged, want 3", failures)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSupervisorStartsNothingAfterClose(t *testing.T) {
	sp, l, _ := startSupervised(t, 100*time.Millisecond, nil)
	l.proc(0).exited.Store(true)
	waitFor(t, "the death to be seen", func() bool { return sp.stateNow() == relaunching })
	sp.close()
	time.Sleep(300 * time.Millisecond)
	if n := len(l.startTimes()); n != 1 {
		t.Fatalf("%d processes started, the one before Close included", n)
	}
	if _, err := sp.current(); !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "is closed") {
		t.Fatalf("a call after Close: %v", err)
	}
	if !l.proc(0).released.Load() {
		t.Fatal("Close did not release the dead process's client")
	}
}

func TestSupervisorDropsAProcessStartedWhileClosing(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	sp, l, _ := startSupervised(t, time.Millisecond, func(n int, _ *session) error {
		if n == 1 {
			close(started)
			<-release // a start that ignores its context
		}
		return nil
	})
	first, _ := sp.current()
	l.proc(0).exited.Store(true)
	<-started
	closeDone := make(chan struct{})
	go func() { sp.close(); close(closeDone) }()
	waitFor(t, "Close to begin", func() bool { return sp.stateNow() == closed })
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
}

func TestSupervisorRetriesARelaunchThatFailsToOpen(t *testing.T) {
	sp, l, log := startSupervised(t, time.Millisecond, func(n int, s *session) error {
		switch n {
		case 1: // a store of another kind: refused
			s.opened.Leases = false
		case 2:
			return runstate.InvalidArgument("dir", "is locked")
		}
		return nil
	})
	first, _ := sp.current()
	l.proc(0).exited.Store(true)
	s := servingAnew(t, sp, first)
	if s.proc != l.proc(3) {
		t.Fatal("a process that failed to open was put in use")
	}
	if !l.proc(1).released.Load() || !l.proc(2).released.Load() {
		t.Fatal("a process that failed to open was left running")
	}
	if _, failures := log.announced(); failures != 2 {
		t.Fatalf("%d failed starts logged, want 2", failures)
	}
}

func TestSupervisorStartsAnotherWhenARelaunchedProcessDiesBeforeUse(t *testing.T) {
	sp, l, _ := startSupervised(t, time.Millisecond, func(n int, s *session) error {
		if n == 1 {
			s.proc.(*fakeProcess).exited.Store(true)
			for !s.dead() { // its watch sees the death before it is in use
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	})
	first, _ := sp.current()
	l.proc(0).exited.Store(true)
	s := servingAnew(t, sp, first)
	if s.proc != l.proc(2) || !l.proc(1).released.Load() {
		t.Fatal("a process that died before use was not replaced and released")
	}
}

func TestSupervisorStartsAFirstProcessThatDiedBeforeUseAgain(t *testing.T) {
	log := &logRecorder{}
	sp := newSupervisor("plugin test", slog.New(log))
	defer sp.close()
	l := &fakeLauncher{sp: sp}
	sp.relaunchWith(relaunchPolicy{launch: l.launch, pause: time.Millisecond, startTimeout: time.Second})
	first, _ := l.launch(context.Background())
	l.proc(0).exited.Store(true)
	waitFor(t, "the death to be seen", first.dead)
	sp.begin(first)
	servingAnew(t, sp, first)
}

func TestSupervisorWithoutRelaunchGoesDown(t *testing.T) {
	sp := newSupervisor("plugin test", slog.New(slog.DiscardHandler))
	defer sp.close()
	p := &fakeProcess{}
	sp.begin(sp.newSession(nil, p))
	p.exited.Store(true)
	waitFor(t, "the death to be seen", func() bool { return sp.stateNow() == down })
	if _, err := sp.current(); !errors.Is(err, runstate.ErrUnavailable) || !strings.HasSuffix(err.Error(), "has exited") {
		t.Fatalf("a call after the death: %v", err)
	}
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
