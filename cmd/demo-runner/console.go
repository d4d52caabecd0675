package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"time"

	"github.com/runstate/runstate"
)

// consoleFiles are the web console: one page, a stylesheet and a script,
// with no dependency fetched at run time (docs/demo-runner.md#the-console
// says why plain HTML, CSS and JavaScript).
//
//go:embed console
var consoleFiles embed.FS

// consoleRoutes serves the console at /ui/ ("/" leads there). Its files
// hold no data, so they need no credentials: the page asks for a token and
// sends it with every API call.
func (a *app) consoleRoutes(mux *http.ServeMux, g *guard) {
	sub, _ := fs.Sub(consoleFiles, "console")
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux.HandleFunc("GET /ui/", a.wrap(g, "", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page loads nothing from elsewhere and may not be framed.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
}

// runCounts is GET /counts's answer: the runs matching a filter, by status.
type runCounts struct {
	ByStatus map[runstate.RunStatus]int `json:"by_status"`
	Total    int                        `json:"total"`
	// Capped: the store holds more matching runs than were counted.
	Capped bool `json:"capped,omitempty"`
}

// countRuns counts the runs matching p's filters (not its statuses, page
// size or cursor) by status, in one pass over the listing, up to
// runsCountLimit (as /metrics counts).
func countRuns(ctx context.Context, store runstate.RunStateStore, p runstate.ListRunsParams) (runCounts, error) {
	c := runCounts{ByStatus: map[runstate.RunStatus]int{}}
	for _, s := range runstate.RunStatuses() {
		c.ByStatus[s] = 0
	}
	p.Statuses, p.Cursor, p.Limit = nil, "", runstate.MaxPageLimit
	for {
		page, err := store.ListRuns(ctx, p)
		if err != nil {
			return c, err
		}
		for _, run := range page.Runs {
			c.ByStatus[run.Status]++
		}
		c.Total += len(page.Runs)
		if p.Cursor = page.NextCursor; p.Cursor == "" {
			return c, nil
		}
		if c.Total >= runsCountLimit {
			c.Capped = true
			return c, nil
		}
	}
}

// leaseView is GET /runs/{id}/lease's answer: the last lease issued on the run.
type leaseView struct {
	// Known: the store tells leases (runstate.LeaseReader); when false
	// nothing else is set.
	Known bool `json:"known"`
	// Token is 0 when the run was never leased.
	Token      int64          `json:"token,omitempty"`
	Owner      runstate.Owner `json:"owner,omitzero"`
	AcquiredAt time.Time      `json:"acquired_at,omitzero"`
	ExpiresAt  time.Time      `json:"expires_at,omitzero"`
}

// lease reads who holds the run, when the store can tell.
func (a *app) lease(ctx context.Context, runID string) (leaseView, error) {
	if _, err := a.runs.GetRun(ctx, runID); err != nil {
		return leaseView{}, err
	}
	lr, ok := runstate.As[runstate.LeaseReader](a.runs)
	if !ok {
		return leaseView{}, nil
	}
	l, err := lr.GetLease(ctx, runID)
	if err != nil {
		return leaseView{}, err
	}
	return leaseView{Known: true, Token: l.Token, Owner: l.Owner, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}, nil
}

// runEvents streams a run as server-sent events: an event "run" with the
// snapshot, its lease and the seq of its last audit event whenever one of
// them changed, read from the store soon after each write of the run when
// the store announces them (runstate.RunWatcher), and every liveEvery in
// any case. (The seq moves without the version when a write to a
// finished run is rejected.) Delivery is at least once: the first event
// is the current state, a reconnecting client gets it again, and the
// store stays the truth.
func (a *app) runEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := a.runs.GetRun(r.Context(), id); err != nil {
		a.reply(w, r, nil, err)
		return
	}
	var auditSeq int64
	a.stream(w, r, liveWatch{what: "run " + id, watch: runstate.WatchRunOf(a.runWatcher, runstate.WatchRunParams{RunID: id})}, func(ctx context.Context) (string, any, error) {
		run, err := a.runs.GetRun(ctx, id)
		if err != nil {
			return "", nil, err
		}
		lease, err := a.lease(ctx, id)
		if err != nil {
			return "", nil, err
		}
		newer, err := a.auditTrailAfter(ctx, id, auditSeq)
		if err != nil {
			return "", nil, err
		}
		if len(newer) > 0 {
			auditSeq = newer[len(newer)-1].Seq
		}
		return "run", map[string]any{"run": run, "lease": lease, "audit_seq": auditSeq}, nil
	})
}

// recountEvery bounds how often a list stream counts the runs when its
// page did not change: a count reads every matching run.
const recountEvery = 5 * time.Second

// listEvents streams GET /runs's page and GET /counts's counts for the
// same query, as an event "runs" whenever either changed. The page is read
// every liveEvery, and at once when the store announces a run that became
// runnable (a submission; runstate.RunnableWatcher); the counts when the
// page changed, else every recountEvery at most.
func (a *app) listEvents(w http.ResponseWriter, r *http.Request) {
	p, err := listParams(r)
	if err != nil {
		a.reply(w, r, nil, err)
		return
	}
	var lastPage []byte
	var counts runCounts
	var counted time.Time
	a.stream(w, r, liveWatch{what: "runnable runs", watch: runstate.WatchRunnableOf(a.watcher)}, func(ctx context.Context) (string, any, error) {
		page, err := a.runs.ListRuns(ctx, p)
		if err != nil {
			return "", nil, err
		}
		list := newRunList(page)
		b, _ := json.Marshal(list)
		if !bytes.Equal(b, lastPage) || time.Since(counted) >= recountEvery {
			if counts, err = countRuns(ctx, a.runs, p); err != nil {
				return "", nil, err
			}
			lastPage, counted = b, time.Now()
		}
		return "runs", map[string]any{"page": list, "counts": counts}, nil
	})
}

// liveWatch is the change stream a live stream follows besides polling.
type liveWatch struct {
	what  string                                         // in the log
	watch func(context.Context) (<-chan struct{}, error) // nil: the store has none
}

// stream sends what read returns as server-sent events, each time it
// differs from the last one sent, until the client goes away: it reads at
// each wake-up of the store's change stream (lw) and every liveEvery
// (runstate.Follow). The header Runstate-Live says which, for the page's
// status. A failed read is sent as an event "problem" (the problem JSON)
// and retried.
func (a *app) stream(w http.ResponseWriter, r *http.Request, lw liveWatch, read func(context.Context) (string, any, error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		a.problem(w, r, http.StatusInternalServerError, codeInternal, "this connection cannot stream")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	every := a.liveEvery
	if every <= 0 {
		every = time.Second
	}
	if a.livePollOnly {
		lw.watch = nil
	}
	following := runstate.Follow(r.Context(), runstate.FollowParams{Watch: lw.watch, Poll: every})
	live := "polling every " + every.String()
	switch {
	case following.Watching:
		live = "watching" // and polling, as a safety net
	case following.WatchErr != nil:
		a.log.Warn("cannot watch the store; the console polls", "watch", lw.what, "every", every, "error", following.WatchErr)
	}
	a.log.Debug("console live stream", "path", r.URL.Path, "live", live, "watch", lw.what, "every", every)
	h.Set("Runstate-Live", live)
	w.WriteHeader(http.StatusOK)
	var last []byte
	// A comment now and then keeps proxies from closing an idle stream,
	// however rarely the store is read.
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		event, v, err := read(r.Context())
		var data []byte
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			event = "problem"
			data, _ = json.Marshal(problem{Type: "about:blank", Title: "Store error", Status: http.StatusServiceUnavailable,
				Detail: err.Error(), Instance: r.URL.Path, Code: string(runstate.CodeOf(err))})
		} else {
			data, _ = json.Marshal(v)
		}
		if !bytes.Equal(data, last) {
			if _, err := w.Write([]byte("event: " + event + "\ndata: " + string(data) + "\n\n")); err != nil {
				return
			}
			last = data
			flusher.Flush()
		}
		if !a.awaitWake(w, flusher, following.Wake, keepAlive.C) {
			return
		}
	}
}

// awaitWake waits for the next wake-up of a live stream, writing a comment
// at each keepAlive meanwhile; false when the stream is over.
func (a *app) awaitWake(w http.ResponseWriter, flusher http.Flusher, wake <-chan struct{}, keepAlive <-chan time.Time) bool {
	for {
		select {
		case _, open := <-wake:
			return open // closed: the client went away
		case <-keepAlive:
			if _, err := w.Write([]byte(": still here\n\n")); err != nil {
				return false
			}
			flusher.Flush()
		}
	}
}
