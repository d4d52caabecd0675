package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// supervisorState is where a client's plugin process stands.
type supervisorState int

const (
	starting    supervisorState = iota // no session serves yet: Open or Connect has not returned
	serving                            // calls go to the current session
	relaunching                        // the current session's process died; another is being started
	down                               // the current session's process died, and none starts in its place
	closed                             // Close was called: nothing starts any more
)

func (st supervisorState) String() string {
	return [...]string{"starting", "serving", "relaunching", "down", "closed"}[st]
}

// transitions lists the states each state may move to; moveTo refuses
// any other move.
var transitions = map[supervisorState][]supervisorState{
	starting:    {serving, relaunching, down, closed}, // the first process may die before use
	serving:     {relaunching, down, closed},
	relaunching: {serving, closed}, // a start that fails, or dies before use, keeps relaunching
	down:        {closed},
	closed:      {},
}

// maxRelaunchPause bounds the pause before a start, however often the
// plugin died.
const maxRelaunchPause = 30 * time.Second

// relaunchPolicy is how a supervisor starts a process in place of a dead
// one (Options.Relaunch).
type relaunchPolicy struct {
	launch       func(ctx context.Context) (*session, error)
	pause        time.Duration // the first pause, and the pause after a process that lived a minute
	startTimeout time.Duration // bounds a start and its Open
	// serving, when set, is called with a process started again once it
	// serves (a test clock is sent to it).
	serving func(*session)
}

// supervisor keeps the session a client's calls go to and, with a
// relaunch policy, starts a process in place of one that died, in the
// background: calls fail with runstate.ErrUnavailable at once meanwhile,
// never hanging (FAULT-002, FAULT-006). Every change of state goes through
// moveTo, under mu.
type supervisor struct {
	peer   string // in messages: "plugin memory"
	log    *slog.Logger
	policy *relaunchPolicy // nil: a dead process is not replaced

	// life ends when the client is closed; every session's life is a
	// child of it.
	life context.Context
	end  context.CancelFunc
	bg   sync.WaitGroup // watchers and the relaunch

	mu    sync.Mutex
	state supervisorState
	cur   *session
	pause time.Duration // before the next start
	// startErr is why the last start of a relaunch failed (nil: none
	// failed since the last process served): calls made meanwhile say
	// it, so that a plugin that cannot open again is seen to say why.
	startErr error
}

func newSupervisor(peer string, log *slog.Logger) *supervisor {
	sp := &supervisor{peer: peer, log: log}
	sp.life, sp.end = context.WithCancel(context.Background())
	return sp
}

// relaunchWith makes the supervisor start a process in place of a dead
// one; called before the first start, whose process may die at once.
func (sp *supervisor) relaunchWith(p relaunchPolicy) {
	if p.pause <= 0 {
		p.pause = time.Second
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.policy, sp.pause = &p, p.pause
}

// moveTo changes the state; sp.mu is held. A move the table does not list
// is a bug in the supervisor, not a condition to handle.
func (sp *supervisor) moveTo(next supervisorState) {
	if !slices.Contains(transitions[sp.state], next) {
		panic(fmt.Sprintf("plugin supervisor of %s: no move from %s to %s", sp.peer, sp.state, next))
	}
	sp.state = next
}

// newSession makes the session of a started process (proc) or of an
// in-process connection (proc nil), watching the process.
func (sp *supervisor) newSession(rpc pb.RunStateStoreClient, proc process) *session {
	s := &session{rpc: rpc, proc: proc, exited: make(chan struct{}), began: time.Now()}
	s.life, s.end = context.WithCancel(sp.life)
	if proc != nil {
		sp.bg.Add(1)
		go sp.watch(s)
	}
	return s
}

// watch notices the process of s exiting.
func (sp *supervisor) watch(s *session) {
	defer sp.bg.Done()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
			if s.proc.Exited() {
				sp.exited(s)
				return
			}
		}
	}
}

// begin makes s, the first session, opened, the one calls go to:
// starting → serving, or on at once when it has died already.
func (sp *supervisor) begin(s *session) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.cur = s
	if s.dead() {
		sp.died(s)
		return
	}
	sp.moveTo(serving)
}

// exited records that the process of s has exited, ending every call in
// flight on it. The session in use moves the supervisor on; any other
// (one not yet in use) is the relaunch's to notice.
func (sp *supervisor) exited(s *session) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	close(s.exited)
	s.end()
	if s == sp.cur && sp.state == serving {
		sp.died(s)
	}
}

// died moves on from the death of s, the session in use: to relaunching,
// starting the relaunch, or down without a policy. sp.mu is held.
func (sp *supervisor) died(s *session) {
	if sp.policy == nil {
		sp.moveTo(down)
		return
	}
	if time.Since(s.began) > time.Minute {
		sp.pause = sp.policy.pause // not a crash loop: start afresh
	}
	sp.moveTo(relaunching)
	sp.log.Warn("store plugin exited; starting it again", "plugin", sp.peer, "in", sp.pause)
	sp.bg.Add(1) // under mu, before close's Wait: close moves to closed first
	go sp.relaunch(s)
}

// relaunch starts processes in place of dead, each after a pause, until
// one serves or the client is closed. The pause doubles (up to 30s) with
// every start, so that a plugin that keeps crashing is not restarted in a
// tight loop; died resets it after a process that lived a minute.
func (sp *supervisor) relaunch(dead *session) {
	defer sp.bg.Done()
	for {
		select {
		case <-time.After(sp.nextPause()):
		case <-sp.life.Done():
			return
		}
		s, err := sp.launch(dead)
		if err != nil {
			if sp.life.Err() != nil {
				return
			}
			sp.log.Error("starting the store plugin again failed; retrying", "plugin", sp.peer, "err", err)
			sp.mu.Lock()
			sp.startErr = err
			sp.mu.Unlock()
			continue
		}
		switch sp.relaunched(s) {
		case serving:
			sp.log.Info("store plugin started again", "plugin", sp.peer)
			dead.kill() // releases go-plugin's client of the dead process
			if sp.policy.serving != nil {
				sp.policy.serving(s)
			}
			return
		case relaunching: // s died before it was in use: start another
			dead.kill()
			dead = s
		case closed:
			s.kill()
			return
		}
	}
}

// nextPause returns the pause before the next start, doubling the one
// after it.
func (sp *supervisor) nextPause() time.Duration {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	pause := sp.pause
	sp.pause = min(2*pause, maxRelaunchPause)
	return pause
}

// launch starts one process in place of dead, whose store it must match.
func (sp *supervisor) launch(dead *session) (*session, error) {
	ctx, cancel := context.WithTimeout(sp.life, sp.policy.startTimeout)
	defer cancel()
	s, err := sp.policy.launch(ctx)
	if err != nil {
		return nil, err
	}
	// The client's store kept the features the first process named.
	if now, was := slices.Sorted(slices.Values(s.opened.Features)), slices.Sorted(slices.Values(dead.opened.Features)); !slices.Equal(now, was) {
		s.kill()
		return nil, fmt.Errorf("the plugin started again names the features %v, where it named %v: the client's store keeps the first's",
			now, was)
	}
	return s, nil
}

// relaunched takes s, started and opened by relaunch, in use and returns
// the state that leaves: serving; relaunching when s has died already (a
// death its watch saw before s was in use); closed when the client was
// closed meanwhile, and s is not used.
func (sp *supervisor) relaunched(s *session) supervisorState {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.state == closed {
		return closed
	}
	sp.cur = s
	if !s.dead() {
		// From here a death of s is exited's to see.
		sp.moveTo(serving)
		sp.startErr = nil
	}
	return sp.state
}

// current returns the session calls go to, or why there is none.
func (sp *supervisor) current() (*session, error) {
	s, _, err := sp.currentOrRelaunching()
	return s, err
}

// currentOrRelaunching is current, and whether, when no session serves,
// a process is being started in place of one that died.
func (sp *supervisor) currentOrRelaunching() (*session, bool, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	s, err := sp.currentLocked()
	return s, sp.state == relaunching, err
}

// currentLocked is current with sp.mu held.
func (sp *supervisor) currentLocked() (*session, error) {
	switch sp.state {
	case closed:
		return nil, runstate.Unavailable(sp.peer+" is closed", nil)
	case starting:
		return nil, runstate.Unavailable(sp.peer+" is not open", nil)
	case relaunching:
		if sp.startErr != nil {
			return nil, runstate.Unavailable(sp.peer+" has exited and is being started again; its last start failed: "+sp.startErr.Error(), sp.startErr)
		}
		return nil, runstate.Unavailable(sp.peer+" has exited and is being started again", nil)
	case down:
		return nil, runstate.Unavailable(sp.peer+" has exited", nil)
	}
	return sp.cur, nil
}

// close moves to closed, so that nothing starts any more, ends every
// session and the relaunch, and stops the current process gracefully (so
// that it closes its store).
func (sp *supervisor) close() {
	sp.mu.Lock()
	if sp.state != closed {
		sp.moveTo(closed)
	}
	sp.mu.Unlock()
	sp.end()
	sp.bg.Wait()
	sp.mu.Lock()
	s := sp.cur
	sp.mu.Unlock()
	if s != nil {
		s.kill()
	}
}
