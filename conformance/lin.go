package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/runstate/runstate"
)

func init() {
	register("LIN-001", "Concurrent CreateRun, UpdateRun, GetRun and ListAuditEvents from several workers and handles form a history linearizable against the contract's sequential model of each run.", none, checkLinearizableRuns)
	register("LIN-002", "Concurrent claims, claim-next, renewals, releases and fenced writes, mixed with the run operations and their batch forms, form a history linearizable against the contract's sequential model of each run.", leases, checkLinearizableLeases)
}

// linOps is how many operations a LIN check records when the target is
// fast enough; a slower one records what a third of the check's time
// allows, and the history is checked all the same. Fewer than linMinOps
// say too little: the harness reports that, not a verdict. (A fixed count
// within a fixed time would make the verdict depend on the machine's load.)
const (
	linOps    = 10_000
	linMinOps = 2_000
)

func checkLinearizableRuns(c *checkState)   { c.checkLinearizable(false) }
func checkLinearizableLeases(c *checkState) { c.checkLinearizable(true) }

// The operations of a history, with what the sequential model needs.
type linInput struct {
	Kind     string // create, update, get, audit, claim, claimNext, renew, release
	Run      string
	Worker   string
	Expected int64
	Token    int64
	Status   runstate.RunStatus // update: the status asked for ("" none)
	Message  string             // update: the message written ("" none)
	// Batch sends an update through UpdateRuns and a claim-next through
	// ClaimRuns (with Max 1), which must answer as the single calls do.
	Batch bool
	// Release: an update with a token releases its lease in its own
	// write (ReleaseLease, LEASE-022).
	Release bool
}

type linOutput struct {
	Code    runstate.Code // "" for success
	Status  runstate.RunStatus
	Version int64
	Message string
	Token   int64
	Events  int64 // audit: how many
	LastVer int64 // audit: the version of the last event
	Other   string
}

// linState is the sequential model of one run (the history is partitioned
// by run): what the contract says the store holds.
type linState struct {
	Exists   bool
	Status   runstate.RunStatus
	Version  int64
	Message  string
	Events   int64
	LastVer  int64
	Token    int64  // the last token issued (0: never leased)
	Holder   string // the worker of that lease
	Released bool
}

func (s linState) leased() bool { return s.Token > 0 && !s.Released }

// linStep is the contract, one operation at a time. It reports whether
// out is what the contract allows for in at state, and the next state.
func linStep(s linState, in linInput, out linOutput) (bool, linState) {
	if in.Kind == "create" {
		if s.Exists {
			return out.Code == runstate.CodeAlreadyExists, s
		}
		if out.Code != "" || out.Version != 1 || out.Status != runstate.StatusQueued {
			return false, s
		}
		return true, linState{Exists: true, Status: runstate.StatusQueued, Version: 1, Events: 1, LastVer: 1}
	}
	if !s.Exists {
		return out.Code == runstate.CodeNotFound, s
	}
	switch in.Kind {
	case "get":
		return out.Code == "" && out.Status == s.Status && out.Version == s.Version && out.Message == s.Message, s
	case "audit":
		return out.Code == "" && out.Events == s.Events && out.LastVer == s.LastVer, s
	case "update":
		return linUpdate(s, in, out)
	case "claim", "claimNext":
		claimable := !s.Status.Terminal() && !s.leased()
		if in.Kind == "claimNext" {
			claimable = claimable && (s.Status == runstate.StatusQueued || s.Status == runstate.StatusWaiting)
			if !claimable {
				return out.Code == runstate.CodeNotFound, s
			}
		} else if !claimable {
			want := runstate.CodeLeaseHeld
			if s.Status.Terminal() {
				want = runstate.CodeNotClaimable
			}
			return out.Code == want, s
		}
		if out.Code != "" || out.Token <= s.Token || (in.Kind == "claimNext" && out.Other != in.Run) {
			return false, s
		}
		s.Token, s.Holder, s.Released = out.Token, in.Worker, false
		return true, s
	case "renew", "release":
		if in.Token != s.Token || s.Released {
			return out.Code == runstate.CodeLeaseLost, s
		}
		if out.Code != "" {
			return false, s
		}
		if in.Kind == "release" {
			s.Released = true
		}
		return true, s
	}
	return false, s
}

func linUpdate(s linState, in linInput, out linOutput) (bool, linState) {
	switch {
	case in.Token != 0 && (in.Token != s.Token || s.Released):
		return out.Code == runstate.CodeLeaseLost, s
	case in.Expected != s.Version:
		return out.Code == runstate.CodeVersionConflict, s
	case s.Status.Terminal():
		if out.Code != runstate.CodeInvalidTransition {
			return false, s
		}
		s.Events, s.LastVer = s.Events+1, s.Version
		return true, s
	case in.Status != "" && !runstate.CanTransition(s.Status, in.Status):
		if out.Code != runstate.CodeInvalidTransition {
			return false, s
		}
		s.Status, s.Version = runstate.StatusFailed, s.Version+1
		s.Events, s.LastVer = s.Events+2, s.Version
		return true, s
	}
	next := s
	next.Version++
	next.Released = s.Released || in.Release
	if in.Message != "" {
		next.Message = in.Message
	}
	if in.Status != "" {
		next.Status = in.Status
		next.Events, next.LastVer = next.Events+1, next.Version
	}
	ok := out.Code == "" && out.Status == next.Status && out.Version == next.Version && out.Message == next.Message
	return ok, next
}

// linNondeterministic is the model porcupine checks: linStep, except that
// an operation the store answered UNAVAILABLE may or may not have taken
// effect, so both next states are possible.
func linNondeterministic(s linState, in linInput, out linOutput) []linState {
	if out.Code != runstate.CodeUnavailable {
		if ok, next := linStep(s, in, out); ok {
			return []linState{next}
		}
		return nil
	}
	states := []linState{s}
	took := linOutput{Token: s.Token + 1, Other: in.Run}
	switch in.Kind {
	case "get", "audit", "renew":
		return states // no effect either way
	case "update", "create":
		// The effect it would have had, had it been answered.
		for _, st := range runstate.RunStatuses() {
			for _, v := range []int64{s.Version + 1, 1} {
				took.Status, took.Version, took.Message = st, v, in.Message
				if took.Message == "" {
					took.Message = s.Message
				}
				for _, code := range []runstate.Code{"", runstate.CodeInvalidTransition} {
					took.Code = code
					if ok, next := linStep(s, in, took); ok && next != s {
						return append(states, next)
					}
				}
			}
		}
		return states
	}
	if ok, next := linStep(s, in, took); ok {
		states = append(states, next)
	}
	return states
}

var linModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byRun := map[string][]porcupine.Operation{}
		var runs []string
		for _, op := range history {
			id := op.Input.(linInput).Run
			if _, ok := byRun[id]; !ok {
				runs = append(runs, id)
			}
			byRun[id] = append(byRun[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(runs))
		for _, id := range runs {
			out = append(out, byRun[id])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{linState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		var out []interface{}
		for _, next := range linNondeterministic(state.(linState), input.(linInput), output.(linOutput)) {
			out = append(out, next)
		}
		return out
	},
	Equal: func(a, b interface{}) bool { return a.(linState) == b.(linState) },
	DescribeOperation: func(input, output interface{}) string {
		return describeLinOp(input.(linInput), output.(linOutput))
	},
	DescribeState: func(state interface{}) string {
		s := state.(linState)
		if !s.Exists {
			return "no run"
		}
		lease := "no lease"
		if s.leased() {
			lease = fmt.Sprintf("leased to %s, token %d", s.Holder, s.Token)
		}
		return fmt.Sprintf("%s v%d %q, %d events (last at v%d), %s", s.Status, s.Version, s.Message, s.Events, s.LastVer, lease)
	},
}

func describeLinOp(in linInput, out linOutput) string {
	var call string
	switch in.Kind {
	case "update":
		call = fmt.Sprintf("update(v%d", in.Expected)
		if in.Token != 0 {
			call += fmt.Sprintf(", token %d", in.Token)
		}
		if in.Status != "" {
			call += ", -> " + string(in.Status)
		}
		if in.Message != "" {
			call += fmt.Sprintf(", message %q", in.Message)
		}
		if in.Release {
			call += ", releasing the lease"
		}
		call += ")"
		if in.Batch {
			call = "batch " + call
		}
	case "renew", "release":
		call = fmt.Sprintf("%s(token %d)", in.Kind, in.Token)
	case "claim", "claimNext":
		call = in.Kind + "(" + in.Worker + ")"
		if in.Batch {
			call = "batch " + call
		}
	default:
		call = in.Kind + "()"
	}
	result := string(out.Code)
	if out.Code == runstate.CodeUnavailable {
		result += " (" + out.Other + ")"
	}
	if result == "" {
		switch in.Kind {
		case "get", "update", "create":
			result = fmt.Sprintf("%s v%d %q", out.Status, out.Version, out.Message)
		case "audit":
			result = fmt.Sprintf("%d events, last at v%d", out.Events, out.LastVer)
		case "claim", "claimNext":
			result = fmt.Sprintf("token %d", out.Token)
		default:
			result = "ok"
		}
	}
	return fmt.Sprintf("%s %s -> %s", in.Run, call, result)
}

// linWorker is one client of the history: it picks operations as a real
// worker would, from what it last saw.
type linWorker struct {
	id     int
	name   string
	store  runstate.RunStateStore
	rng    *rand.Rand
	seen   map[string]int64 // run -> the last version this worker saw
	status map[string]runstate.RunStatus
	tokens map[string]int64 // run -> the token this worker holds (as far as it knows)
}

// linRuns is the pool of run ids the workers share; a worker that sees a
// run finish adds a fresh one, so that there is always something to do.
type linRuns struct {
	mu   sync.Mutex
	ids  []string
	next atomic.Int64
}

func (r *linRuns) pick(rng *rand.Rand) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[rng.IntN(len(r.ids))]
}

func (r *linRuns) replace(done string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.ids, done); i >= 0 {
		r.ids[i] = fmt.Sprintf("lin-%d", r.next.Add(1))
	}
}

// checkLinearizable records a concurrent history and checks it.
func (c *checkState) checkLinearizable(withLeases bool) {
	const workers = 8
	runs := &linRuns{}
	for range 12 {
		runs.ids = append(runs.ids, fmt.Sprintf("lin-%d", runs.next.Add(1)))
	}
	stores := c.handles(workers)
	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	var count atomic.Int64
	budget, maxOps := time.Now().Add(c.linBudget()), c.maxLinOps()
	c.parallel(workers, func(i int) {
		w := &linWorker{id: i, name: fmt.Sprintf("lin-w%d", i), store: stores[i], rng: rand.New(rand.NewPCG(uint64(i), 7)),
			seen: map[string]int64{}, status: map[string]runstate.RunStatus{}, tokens: map[string]int64{}}
		var mine []porcupine.Operation
		for count.Add(1) <= maxOps && time.Now().Before(budget) && c.ctx.Err() == nil {
			in := w.choose(runs, withLeases)
			call := time.Since(start).Nanoseconds()
			out, err := w.do(c, in)
			ret := time.Since(start).Nanoseconds()
			if err != nil {
				c.Fatalf("every operation to succeed or fail with a contract error", "%s: %s", describeLinOp(in, out), describeErr(err))
			}
			w.learn(in, out, runs)
			if out.Code == runstate.CodeUnavailable {
				ret = math.MaxInt64 / 2 // its effect, if any, may land at any time after the call
			}
			mine = append(mine, porcupine.Operation{ClientId: i, Input: in, Call: call, Output: out, Return: ret})
		}
		mu.Lock()
		history = append(history, mine...)
		mu.Unlock()
	})
	if c.ctx.Err() != nil {
		c.harnessFatal("the check's time ran out while recording the history")
	}
	if len(history) < linMinOps {
		c.broke(fmt.Sprintf("recorded %d operations within the budget of %v, fewer than %d", len(history), c.linBudget(), linMinOps))
	}
	checkStart := time.Now()
	model := linModel.ToModel()
	result, info := porcupine.CheckOperationsVerbose(model, history, 2*time.Minute)
	switch result {
	case porcupine.Ok:
		c.note(fmt.Sprintf("%d operations from %d workers over %d runs, recorded in %v, linearizable (checked in %v)",
			len(history), workers, runs.next.Load(), checkStart.Sub(start).Round(time.Millisecond), time.Since(checkStart).Round(time.Millisecond)))
	case porcupine.Unknown:
		c.broke(fmt.Sprintf("the linearizability check of %d operations did not finish in 2 minutes", len(history)))
	default:
		var html bytes.Buffer
		if err := porcupine.Visualize(model, info, &html); err == nil {
			c.attach("history.html", html.Bytes()) // the report names it after the rule
		}
		c.Errorf("a history that some order of the operations, each taking effect between its call and its return, explains",
			"%s", explainIllegal(history, info))
	}
}

// maxLinOps is how many operations a LIN check records at most
// (Target.LinOps).
func (c *checkState) maxLinOps() int64 {
	switch n := c.target.LinOps; {
	case n == 0 || n > linOps:
		return linOps
	case n < linMinOps:
		return linMinOps
	default:
		return int64(n)
	}
}

// linBudget is how long recording may take: most of the check's time.
func (c *checkState) linBudget() time.Duration {
	if d, ok := c.ctx.Deadline(); ok {
		return time.Until(d) / 3
	}
	return time.Minute
}

// explainIllegal names the run whose history no order explains, with the
// longest prefix some order explains and the operations that cannot come next.
func explainIllegal(history []porcupine.Operation, info porcupine.LinearizationInfo) string {
	byRun := linModel.Partition(history)
	partials := info.PartialLinearizationsOperations()
	for i, part := range byRun {
		if i >= len(partials) {
			break
		}
		longest := 0
		var prefix []porcupine.Operation
		for _, lin := range partials[i] {
			if len(lin) > longest {
				longest, prefix = len(lin), lin
			}
		}
		if longest == len(part) {
			continue
		}
		done := map[porcupine.Operation]bool{}
		for _, op := range prefix {
			done[op] = true
		}
		var rest []porcupine.Operation
		for _, op := range part {
			if !done[op] {
				rest = append(rest, op)
			}
		}
		sort.Slice(rest, func(a, b int) bool { return rest[a].Call < rest[b].Call })
		var b strings.Builder
		run := part[0].Input.(linInput).Run
		states := []linState{{}}
		for _, op := range prefix {
			var next []linState
			for _, st := range states {
				next = append(next, linNondeterministic(st, op.Input.(linInput), op.Output.(linOutput))...)
			}
			if len(next) > 0 {
				states = next
			}
		}
		state := states[0]
		fmt.Fprintf(&b, "run %s: %d of its %d operations can be ordered; after them the run is %s, and none of these fits next:",
			run, longest, len(part), linModel.DescribeState(state))
		for _, op := range rest[:min(len(rest), 5)] {
			fmt.Fprintf(&b, "\n  worker %d, %.3fms..%.3fms: %s", op.ClientId, float64(op.Call)/1e6, float64(op.Return)/1e6,
				describeLinOp(op.Input.(linInput), op.Output.(linOutput)))
		}
		if len(prefix) > 0 {
			last := prefix[len(prefix)-1]
			fmt.Fprintf(&b, "\n  (the last operation ordered: worker %d: %s)", last.ClientId, describeLinOp(last.Input.(linInput), last.Output.(linOutput)))
		}
		return b.String()
	}
	return "the history is not linearizable (no single run's history could be singled out)"
}

// choose picks the next operation, mostly ones a worker would make.
func (w *linWorker) choose(runs *linRuns, withLeases bool) linInput {
	run := runs.pick(w.rng)
	in := linInput{Run: run, Worker: w.name}
	n := w.rng.IntN(100)
	if !withLeases {
		n = n * 55 / 100 // run operations only
	}
	switch {
	case n < 4:
		in.Kind = "create"
	case n < 30:
		in.Kind = "update"
		in.Expected = w.seen[run]
		if w.rng.IntN(10) == 0 {
			in.Expected += int64(w.rng.IntN(3)) - 1 // sometimes stale or ahead
		}
		if in.Expected < 1 {
			in.Expected = 1
		}
		if withLeases && w.rng.IntN(2) == 0 {
			in.Token = w.tokens[run]
			in.Release = in.Token != 0 && w.rng.IntN(4) == 0
		}
		in.Batch = w.rng.IntN(3) == 0
		switch r := w.rng.IntN(10); {
		case r < 3:
			in.Message = fmt.Sprintf("%s-%d", w.name, w.rng.IntN(1000))
		case r < 9:
			in.Status = w.nextStatus(run)
		default:
			in.Status = runstate.RunStatuses()[w.rng.IntN(len(runstate.RunStatuses()))]
		}
	case n < 45:
		in.Kind = "get"
	case n < 55:
		in.Kind = "audit"
	case n < 70:
		in.Kind = "claim"
	case n < 80:
		in.Kind = "claimNext"
		in.Batch = w.rng.IntN(3) == 0
	case n < 90:
		in.Kind = "renew"
		in.Token = max(w.tokens[run], 1)
	default:
		in.Kind = "release"
		in.Token = max(w.tokens[run], 1)
	}
	return in
}

// nextStatus picks a status the table allows from the last one seen,
// mostly a non-terminal one, so runs live long enough to be raced over.
func (w *linWorker) nextStatus(run string) runstate.RunStatus {
	cur := w.status[run]
	if cur == "" {
		cur = runstate.StatusQueued
	}
	next := allowedFrom(cur)
	if len(next) == 0 {
		return runstate.StatusRunning
	}
	var live []runstate.RunStatus
	for _, st := range next {
		if !st.Terminal() {
			live = append(live, st)
		}
	}
	if len(live) > 0 && w.rng.IntN(10) < 9 {
		return live[w.rng.IntN(len(live))]
	}
	return next[w.rng.IntN(len(next))]
}

// do performs in and returns what the store said; err is set only for an
// error outside the contract.
func (w *linWorker) do(c *checkState, in linInput) (linOutput, error) {
	var out linOutput
	var err error
	setRun := func(r runstate.RunSnapshot, e error) {
		err = e
		if e == nil {
			out.Status, out.Version, out.Message = r.Status, r.Version, r.Message
		}
	}
	ctx := c.ctx
	switch in.Kind {
	case "create":
		setRun(w.store.CreateRun(ctx, runstate.CreateRunParams{RunID: in.Run, WorkflowName: workflow, Labels: map[string]string{"lin": in.Run}, Actor: worker}))
	case "get":
		setRun(w.store.GetRun(ctx, in.Run))
	case "update":
		p := runstate.UpdateRunParams{RunID: in.Run, ExpectedVersion: in.Expected, LeaseToken: in.Token, Status: string(in.Status), Actor: worker}
		if in.Message != "" {
			p.Message = &in.Message
		}
		if in.Status.RequiresDiagnostic() {
			p.Diagnostic = &runstate.Diagnostic{ErrorCode: "E_LIN", Message: "on purpose"}
		}
		if in.Status == runstate.StatusInterrupted {
			p.InterruptedReason = "LIN"
		}
		p.ReleaseLease = in.Release
		if !in.Batch {
			setRun(w.store.UpdateRun(ctx, p))
			break
		}
		res, batchErr := runstate.UpdateRuns(ctx, w.store, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{p}})
		if err = batchErr; err == nil {
			setRun(res.Items[0].Run, res.Items[0].Err)
		}
	case "audit":
		var page runstate.AuditPage
		page, err = w.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: in.Run, Limit: runstate.MaxPageLimit})
		if err == nil {
			out.Events = int64(len(page.Events))
			if len(page.Events) > 0 {
				out.LastVer = page.Events[len(page.Events)-1].Version
			}
		}
	case "claim", "claimNext":
		ls := c.leaseStoreOf(w.store)
		owner := runstate.Owner{Worker: in.Worker, Incarnation: "1"}
		var cl runstate.Claim
		filter := runstate.RunnableFilter{Labels: map[string]string{"lin": in.Run}}
		switch {
		case in.Kind == "claim":
			cl, err = ls.ClaimRun(ctx, runstate.ClaimRunParams{RunID: in.Run, Owner: owner, TTL: time.Hour, Statuses: anyLive})
		case in.Batch:
			var res runstate.ClaimRunsResult
			res, err = runstate.ClaimRuns(ctx, ls, runstate.ClaimRunsParams{Owner: owner, TTL: time.Hour, Max: 1, Filter: filter})
			if err == nil && len(res.Claims) == 0 {
				err = &runstate.Error{Code: runstate.CodeNotFound, RunID: in.Run}
			} else if err == nil {
				cl = res.Claims[0]
			}
			out.Other = cl.Run.RunID
		default:
			cl, err = ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour, Filter: filter})
			out.Other = cl.Run.RunID
		}
		out.Token = cl.Lease.Token
	case "renew":
		_, err = c.leaseStoreOf(w.store).RenewLease(ctx, runstate.RenewLeaseParams{RunID: in.Run, Token: in.Token, TTL: time.Hour})
	case "release":
		err = c.leaseStoreOf(w.store).ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: in.Run, Token: in.Token})
	}
	var se *runstate.Error
	if errors.As(err, &se) {
		out.Code = se.Code
		if se.Code == runstate.CodeUnavailable {
			out.Other = se.Error()
		}
		return out, nil
	}
	return out, err
}

// learn updates what the worker knows from an operation's result.
func (w *linWorker) learn(in linInput, out linOutput, runs *linRuns) {
	switch {
	case out.Code == "" && (in.Kind == "get" || in.Kind == "update" || in.Kind == "create"):
		w.seen[in.Run], w.status[in.Run] = out.Version, out.Status
		if out.Status.Terminal() {
			runs.replace(in.Run)
		}
	case out.Code == runstate.CodeVersionConflict, out.Code == runstate.CodeInvalidTransition:
		w.seen[in.Run]++ // a guess; the next get corrects it
	case out.Code == "" && (in.Kind == "claim" || in.Kind == "claimNext"):
		w.tokens[in.Run] = out.Token
	case out.Code == runstate.CodeNotClaimable:
		runs.replace(in.Run)
	}
}
