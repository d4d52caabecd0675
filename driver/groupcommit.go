package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
)

// GroupCommit configures how the kit's store coalesces concurrent single
// writes into one driver write. It is invisible to callers except in
// speed: each caller hears success only once its own change is committed,
// hears its own outcome (its refusal, its ErrNotFound), and when a shared
// write fails as a whole, each of its callers hears that failure, as from
// a write of its own: no change is acknowledged unless committed, and none
// is sent twice (a write that failed at its commit may have been stored).
//
// Writes coalesce as leader and followers: a call that finds no write of
// its kind in flight goes at once, alone, exactly as without group commit;
// calls that arrive while one is in flight wait and go together in the
// next shared write, in arrival order, up to MaxBatch of them. So a lone
// caller waits for nothing, and under load one write (MaxInFlight) is in
// flight at a time per kind, carrying everything that arrived meanwhile.
// Two changes of the same run never share a write, nor go in two writes
// at once: the later one goes in a later write. That gains most where
// writes are serial anyway (one log synced per commit); a store whose
// single writes run well in parallel (a pool of connections to a database
// that groups its own log syncs) may do better with a larger MaxInFlight,
// or Off: measure.
//
// What coalesces: UpdateRun, ClaimRun, RenewLease and ReleaseLease, and
// the kit's own claim-next over Runnable, through BatchModifier.ModifyMany
// (GetLease too, without a LeaseReader); CreateRun through
// BatchInserter.InsertMany; ClaimNextRun calls of one filter, TTL and
// owner through BatchNextClaimer.ClaimNextMany, each claimer with a run
// and lease of its own, and those left over when fewer runs were
// claimable asking again alone. A driver without the interface gets one
// write per call, as with Off.
//
// Contexts: a caller whose context ends while its change waits gets the
// context's error and its change is never sent. Once its change is sent
// the caller still returns at once with the context's error, but the
// shared write goes on under its own context (the first caller's values,
// none of the callers' deadlines), which ends only when every caller in
// it has given up; so the change may have been committed, as a single
// write in flight when its context ended may have been. A retry alone
// after a shared write failed runs under the caller's own context.
type GroupCommit struct {
	// MaxBatch is the most changes one shared write carries; 0 means
	// DefaultMaxBatch, and it is at most runstate.MaxBatchItems.
	MaxBatch int
	// MaxInFlight is how many writes of one kind (alone or shared) may be
	// in flight at once; 0 means 1. More suit a store whose writes run well
	// in parallel; a run's changes still go one write after another.
	MaxInFlight int
	// Window is how long a shared write waits for more changes before it
	// goes, once the write before it finished; 0 (the default) waits for
	// nothing beyond the write in flight.
	Window time.Duration
	// Off turns group commit off: one driver write per call.
	Off bool
}

// DefaultMaxBatch is GroupCommit.MaxBatch when it is 0.
const DefaultMaxBatch = 100

// maxBatch is the batch bound g sets.
func (g GroupCommit) maxBatch() int {
	switch {
	case g.MaxBatch <= 0:
		return DefaultMaxBatch
	case g.MaxBatch > runstate.MaxBatchItems:
		return runstate.MaxBatchItems
	}
	return g.MaxBatch
}

// WrapOptions configure WrapWith.
type WrapOptions struct {
	GroupCommit GroupCommit
	// Logger, when set, receives a debug line for every lease the store
	// granted, renewed or released, once the write that decided it
	// committed: the lease's token, owner and times in the store's own
	// clock, and for a claim the lease it ended as the claim's write read
	// it. Read from a fleet's logs, they tell whether a lease was live
	// when another worker took the run (docs/leases.md).
	Logger *slog.Logger
}

// requestState is where a waiting request is: queued, sent in a shared
// write, or given up by its caller before it was sent.
type requestState int

const (
	queued requestState = iota
	sent
	abandoned
)

// groupRequest is one caller's change waiting for, or in, a shared write.
type groupRequest[T any] struct {
	ctx   context.Context
	key   string // the run it changes, or what a claim asks for
	item  T
	done  chan struct{} // closed once the outcome is set
	state requestState  // guarded by the committer's mutex

	// The outcome, set before done is closed: err is the change's own
	// error, and alone says the shared write did not carry the change
	// (a claim left over) and the caller must make it on its own.
	err   error
	alone bool
}

// committer coalesces concurrent writes of one kind (T is what one write
// carries) into shared writes, at most maxInFlight in flight at a time.
type committer[T any] struct {
	maxBatch, maxInFlight int
	window                time.Duration
	// single is the write of one item alone, under the caller's context.
	single func(ctx context.Context, key string, item T) error
	// shared is the write of a batch: it sets each request's err, or alone
	// on a request the write did not carry.
	shared func(ctx context.Context, batch []*groupRequest[T])

	// sameKey makes a batch one key's requests (claims of one query), else
	// distinct keys' (changes of distinct runs), and then a key in flight
	// waits for its write to end, so that a run's changes go in order.
	sameKey bool

	mu       sync.Mutex
	inFlight int            // writes in flight, alone or shared
	flying   map[string]int // the keys of the writes in flight
	queue    []*groupRequest[T]
}

// newCommitter returns a committer of g's bounds.
func newCommitter[T any](g GroupCommit, sameKey bool, single func(context.Context, string, T) error, shared func(context.Context, []*groupRequest[T])) *committer[T] {
	return &committer[T]{maxBatch: g.maxBatch(), maxInFlight: max(1, g.MaxInFlight), window: g.Window,
		single: single, shared: shared, sameKey: sameKey, flying: make(map[string]int)}
}

// do writes item alone when a write may start and none waits, else in a
// later shared write; it returns the error single or shared gave it.
func (c *committer[T]) do(ctx context.Context, key string, item T) error {
	c.mu.Lock()
	if c.inFlight < c.maxInFlight && len(c.queue) == 0 && c.free(key) {
		c.takeOffLocked(key)
		c.mu.Unlock()
		defer c.land(key)
		return c.single(ctx, key, item)
	}
	r := &groupRequest[T]{ctx: ctx, key: key, item: item, done: make(chan struct{})}
	c.queue = append(c.queue, r)
	c.leadLocked()
	c.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		c.mu.Lock()
		if r.state == queued {
			r.state = abandoned // never sent
		}
		c.mu.Unlock()
		// Sent or not, the caller gives up now; a sent change may still
		// be committed (see GroupCommit).
		return ctx.Err()
	}
	if r.alone {
		if err := ctx.Err(); err != nil {
			return err
		}
		return c.single(ctx, key, item)
	}
	return r.err
}

// free reports whether a write of key may start beside those in flight.
func (c *committer[T]) free(key string) bool { return c.sameKey || c.flying[key] == 0 }

// takeOffLocked counts a write of keys in flight.
func (c *committer[T]) takeOffLocked(keys ...string) {
	c.inFlight++
	c.countFlyingLocked(1, keys...)
}

// countFlyingLocked adds delta to the writes in flight of each key.
func (c *committer[T]) countFlyingLocked(delta int, keys ...string) {
	for _, k := range keys {
		if c.flying[k] += delta; c.flying[k] == 0 {
			delete(c.flying, k)
		}
	}
}

// land ends a write alone: what queued meanwhile goes next.
func (c *committer[T]) land(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	c.countFlyingLocked(-1, key)
	c.leadLocked()
}

// leadLocked starts a leader for the queue when a write may start, in a
// goroutine of its own so that the caller that started it waits only for
// its own change.
func (c *committer[T]) leadLocked() {
	if len(c.queue) > 0 && c.inFlight < c.maxInFlight {
		c.inFlight++
		go c.lead()
	}
}

// lead sends shared writes while requests that may go are queued.
func (c *committer[T]) lead() {
	for {
		if c.window > 0 {
			time.Sleep(c.window)
		}
		c.mu.Lock()
		batch := c.takeLocked()
		if len(batch) == 0 {
			c.inFlight--
			c.mu.Unlock()
			return
		}
		keys := make([]string, len(batch))
		for i, r := range batch {
			keys[i] = r.key
		}
		c.countFlyingLocked(1, keys...)
		c.mu.Unlock()
		c.send(batch)
		c.mu.Lock()
		c.countFlyingLocked(-1, keys...)
		c.mu.Unlock()
	}
}

// takeLocked takes the next batch from the queue, in arrival order: at
// most maxBatch requests that fit together and beside the writes in
// flight, dropping those given up. A request that does not fit stays
// queued, ahead of later ones.
func (c *committer[T]) takeLocked() []*groupRequest[T] {
	var batch []*groupRequest[T]
	keys := make(map[string]bool)
	rest := c.queue[:0]
	for _, r := range c.queue {
		switch {
		case r.state == abandoned:
		case r.ctx.Err() != nil: // its caller is giving up: never send it
			r.state, r.err = abandoned, r.ctx.Err()
			close(r.done)
		case len(batch) < c.maxBatch && c.free(r.key) && c.fits(batch, keys, r.key):
			keys[r.key] = true
			r.state = sent
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	return batch
}

// fits reports whether a request for key may join batch, whose keys are
// in keys.
func (c *committer[T]) fits(batch []*groupRequest[T], keys map[string]bool, key string) bool {
	if c.sameKey {
		return len(batch) == 0 || batch[0].key == key
	}
	return !keys[key]
}

// send makes batch one shared write and tells each caller its outcome.
func (c *committer[T]) send(batch []*groupRequest[T]) {
	ctx, stop := batchContext(batch)
	defer stop()
	c.shared(ctx, batch)
	for _, r := range batch {
		close(r.done)
	}
}

// batchContext is the context of a shared write: the first request's
// values, ended only when every request's own context has ended, so that
// one caller giving up does not fail the others' write.
func batchContext[T any](batch []*groupRequest[T]) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	waiting := atomic.Int64{}
	waiting.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, r := range batch {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// modifyCommitter coalesces Modify calls into ModifyMany.
func modifyCommitter(d Driver, bm BatchModifier, g GroupCommit) *committer[func(Current) Change] {
	return newCommitter(g, false, d.Modify, func(ctx context.Context, batch []*groupRequest[func(Current) Change]) {
		items := make([]ModifyItem, len(batch))
		for i, r := range batch {
			items[i] = ModifyItem{RunID: r.key, Change: r.item}
		}
		if err := bm.ModifyMany(ctx, items); err != nil {
			// Each caller hears what a write of its own that failed so
			// would have said. Sending each change again alone could
			// apply one twice: a write that failed at its commit may
			// have been stored (an UNAVAILABLE says so).
			for _, r := range batch {
				r.err = err
			}
			return
		}
		for i, r := range batch {
			r.err = items[i].Err
		}
	})
}

// insertCommitter coalesces Insert calls into InsertMany.
func insertCommitter(d Driver, bi BatchInserter, g GroupCommit) *committer[InsertParams] {
	single := func(ctx context.Context, _ string, run InsertParams) error { return d.Insert(ctx, run) }
	return newCommitter(g, false, single, func(ctx context.Context, batch []*groupRequest[InsertParams]) {
		shareInserts(ctx, bi, batch)
	})
}

// shareInserts inserts batch in one InsertMany. InsertMany is all or none,
// so a batch refused for an existing run gives that run its refusal and
// goes again without it; any other failure is every caller's, as for a
// write of its own (sending each again could store one twice).
func shareInserts(ctx context.Context, bi BatchInserter, batch []*groupRequest[InsertParams]) {
	pending := slices.Clone(batch)
	for len(pending) > 0 {
		runs := make([]InsertParams, len(pending))
		for i, r := range pending {
			runs[i] = r.item
		}
		err := bi.InsertMany(ctx, runs)
		if err == nil {
			return
		}
		var itemErr *runstate.BatchItemError
		if !errors.As(err, &itemErr) || runstate.CodeOf(itemErr.Err) != runstate.CodeAlreadyExists ||
			itemErr.Index < 0 || itemErr.Index >= len(pending) {
			for _, r := range pending {
				r.err = err
			}
			return
		}
		pending[itemErr.Index].err = itemErr.Err
		pending = slices.Delete(pending, itemErr.Index, itemErr.Index+1)
	}
}

// claimAsk is one ClaimNextRun waiting for a shared ClaimNextMany: its
// query, and its claiming, which holds its claim once settled.
type claimAsk struct {
	q  RunnableQuery
	cl *claiming
}

// claimShared is claim-next of cl in a shared ClaimNextMany with the
// concurrent claims of the same query, TTL and owner.
func (w *wrapped) claimShared(ctx context.Context, q RunnableQuery, cl *claiming) (runstate.Claim, error) {
	if err := w.claims.do(ctx, claimKey(q, cl.req), &claimAsk{q: q, cl: cl}); err != nil {
		return runstate.Claim{}, err
	}
	return cl.claim, nil
}

// claimKey names what a claim-next asks for, so that only claims that ask
// for the same (owner, TTL, statuses, workflow, labels) share a write.
// Every part is quoted, so that no two different asks have one key; a
// field that decides a claim and is left out here would let claims of
// different asks share one, so a new one belongs here too.
func claimKey(q RunnableQuery, req claimRequest) string {
	parts := []string{req.Owner.Worker, req.Owner.Incarnation, req.TTL.String(), q.WorkflowName}
	for _, st := range req.Statuses {
		parts = append(parts, "req:"+string(st))
	}
	for _, st := range q.Statuses {
		parts = append(parts, "q:"+string(st))
	}
	for _, k := range slices.Sorted(maps.Keys(q.Labels)) {
		parts = append(parts, "label:"+k, q.Labels[k])
	}
	var b strings.Builder
	for _, part := range parts {
		b.WriteString(strconv.Quote(part))
	}
	return b.String()
}

// claimCommitters coalesce claim-next calls of one query, TTL and owner
// into ClaimNextMany. The owner is part of the key because the driver
// admits runs for one claimant (LEASE-012). Each key has a committer of
// its own, so that claims of different owners never wait for each other's
// write (a fleet of workers claims as fast as it did alone); a key's
// committer leaves the map when its last caller returns.
type claimCommitters struct {
	newCommitter func() *committer[*claimAsk]

	mu    sync.Mutex
	byKey map[string]*keyCommitter
}

// keyCommitter is one key's committer and the callers using it.
type keyCommitter struct {
	*committer[*claimAsk]
	callers int // guarded by claimCommitters.mu
}

func claimCommitter(w *wrapped, bc BatchNextClaimer, g GroupCommit) *claimCommitters {
	single := func(ctx context.Context, _ string, ask *claimAsk) error {
		_, err := w.claimOne(ctx, ask.q, ask.cl)
		return err
	}
	return &claimCommitters{byKey: make(map[string]*keyCommitter), newCommitter: func() *committer[*claimAsk] {
		return newCommitter(g, true, single, func(ctx context.Context, batch []*groupRequest[*claimAsk]) {
			shareClaims(ctx, bc, batch)
		})
	}}
}

// do claims through key's committer.
func (cc *claimCommitters) do(ctx context.Context, key string, ask *claimAsk) error {
	cc.mu.Lock()
	kc := cc.byKey[key]
	if kc == nil {
		kc = &keyCommitter{committer: cc.newCommitter()}
		cc.byKey[key] = kc
	}
	kc.callers++
	cc.mu.Unlock()
	defer func() {
		cc.mu.Lock()
		if kc.callers--; kc.callers == 0 {
			delete(cc.byKey, key) // idle: no caller waits on it
		}
		cc.mu.Unlock()
	}()
	return kc.committer.do(ctx, key, ask)
}

// shareClaims claims a run for each ask of batch in one ClaimNextMany. A
// driver that retries calls take afresh and the claims are those of its
// last n calls, so call k goes to ask k mod len(batch): n ≤ len(batch)
// consecutive calls go to n distinct asks. The asks left over when fewer
// runs were claimable ask again alone, and hear "nothing runnable" only
// if that is then true (LEASE-017).
func shareClaims(ctx context.Context, bc BatchNextClaimer, batch []*groupRequest[*claimAsk]) {
	type offer struct {
		ask int
		cl  *claiming
	}
	var offers []offer
	q := batch[0].item.q
	q.Claimant = &batch[0].item.cl.req.Owner
	n, err := bc.ClaimNextMany(ctx, q, len(batch), func(cur Current) Change {
		i := len(offers) % len(batch)
		cl := &claiming{req: batch[i].item.cl.req}
		offers = append(offers, offer{ask: i, cl: cl})
		return cl.take(cur)
	})
	switch {
	case err != nil:
		for _, r := range batch {
			r.err = err // as for a claim of its own (see modifyCommitter)
		}
		return
	case n < 0 || n > len(offers) || n > len(batch):
		for _, r := range batch {
			r.err = runstate.Unavailable(fmt.Sprintf("claim-next: the store reported %d claims, of %d offered", n, len(offers)), nil)
		}
		return
	}
	claimed := make([]bool, len(batch))
	for _, o := range offers[len(offers)-n:] {
		claimed[o.ask] = true
		if o.cl.refused != nil { // the driver offered a run q does not admit
			batch[o.ask].err = runstate.Unavailable("claim-next: the store offered a run it may not claim", o.cl.refused)
			continue
		}
		batch[o.ask].item.cl.claim, batch[o.ask].item.cl.ended = o.cl.claim, o.cl.ended
	}
	for i, r := range batch {
		r.alone = !claimed[i]
	}
}
