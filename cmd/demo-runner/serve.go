package main

import (
	"context"
	"crypto/tls"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/access"
	"github.com/runstate/runstate/tracker"
)

// openAPIYAML describes the API; a test checks every route and answer
// against it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// httpStatus maps the contract's codes to HTTP: bad input 400, absent
// 404, a conflict with the run's state or version 409, a store away 503.
var httpStatus = map[runstate.Code]int{
	runstate.CodeInvalidArgument:   http.StatusBadRequest,
	runstate.CodeMissingDiagnostic: http.StatusBadRequest,
	runstate.CodeUnauthenticated:   http.StatusUnauthorized,
	runstate.CodePermissionDenied:  http.StatusForbidden,
	runstate.CodeNotFound:          http.StatusNotFound,
	runstate.CodeAlreadyExists:     http.StatusConflict,
	runstate.CodeVersionConflict:   http.StatusConflict,
	runstate.CodeInvalidTransition: http.StatusConflict,
	runstate.CodeLeaseHeld:         http.StatusConflict,
	runstate.CodeLeaseLost:         http.StatusConflict,
	runstate.CodeNotClaimable:      http.StatusConflict,
	runstate.CodeUnavailable:       http.StatusServiceUnavailable,
	runstate.CodeUnsupported:       http.StatusNotImplemented,
}

// Codes of the API's own refusals, beside the contract's.
const (
	codeRunFinished     = "RUN_FINISHED"      // cancel or signal a run that has ended
	codeRunNotWaiting   = "RUN_NOT_WAITING"   // signal a run that waits for nothing
	codeRunNotRetryable = "RUN_NOT_RETRYABLE" // retry a run that has not finished, succeeded, or may not be retried
	codeInternal        = "INTERNAL"          // a failure with no code of its own
)

// route is one operation of the API.
type route struct {
	method, pattern string
	// need is the least role a caller needs when serve has a tokens file;
	// "" for what holds no data (probes, the API's description).
	need   access.Role
	handle http.HandlerFunc
}

// routes are the API's operations; openapi.yaml describes exactly these.
// It is one table, longer than a function should be, so that every route,
// the role it needs, and what it does read in one place.
func (a *app) routes() []route {
	return []route{
		{"GET", "/healthz", "", func(w http.ResponseWriter, r *http.Request) {
			_, err := a.runs.GetRun(r.Context(), "healthz-probe")
			if err != nil && !errors.Is(err, runstate.ErrNotFound) {
				a.reply(w, r, nil, err)
				return
			}
			a.reply(w, r, map[string]string{"status": "ok"}, nil)
		}},
		{"GET", "/whoami", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			a.reply(w, r, whoami(r), nil)
		}},
		{"GET", "/runs", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			p, err := listParams(r)
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			page, err := a.runs.ListRuns(r.Context(), p)
			a.reply(w, r, newRunList(page), err)
		}},
		{"GET", "/counts", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			p, err := listParams(r)
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			counts, err := countRuns(r.Context(), a.runs, p)
			a.reply(w, r, counts, err)
		}},
		{"GET", "/runs/{id}", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			run, err := a.runs.GetRun(r.Context(), r.PathValue("id"))
			a.reply(w, r, run, err)
		}},
		{"GET", "/runs/{id}/audit", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			var after int64
			if s := r.URL.Query().Get("after"); s != "" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n < 0 {
					a.reply(w, r, nil, runstate.InvalidArgument("after", "%q is not a sequence number (0 or more)", s))
					return
				}
				after = n
			}
			events, err := a.auditTrailAfter(r.Context(), r.PathValue("id"), after)
			a.reply(w, r, events, err)
		}},
		{"GET", "/runs/{id}/lease", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			lease, err := a.lease(r.Context(), r.PathValue("id"))
			a.reply(w, r, lease, err)
		}},
		{"GET", "/runs/{id}/events", access.RoleReader, a.runEvents},
		{"GET", "/events/runs", access.RoleReader, a.listEvents},
		{"POST", "/runs/{id}/signal", access.RoleOperator, func(w http.ResponseWriter, r *http.Request) {
			run, err := a.operatorFor(r).Signal(r.Context(), r.PathValue("id"))
			a.reply(w, r, run, err)
		}},
		{"POST", "/runs/{id}/cancel", access.RoleOperator, func(w http.ResponseWriter, r *http.Request) {
			reason, err := cancelReason(r)
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			run, err := a.operatorFor(r).Cancel(r.Context(), r.PathValue("id"), reason)
			if err == nil {
				a.metrics.observeFinished(run)
			}
			a.reply(w, r, run, err)
		}},
		{"POST", "/runs/{id}/retry", access.RoleOperator, func(w http.ResponseWriter, r *http.Request) {
			run, err := a.queueRetry(r.Context(), r.PathValue("id"))
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(run)
		}},
		{"GET", "/deadletters", access.RoleReader, func(w http.ResponseWriter, r *http.Request) {
			list, err := a.dead.List()
			if list == nil {
				list = []tracker.DeadLetter{}
			}
			a.reply(w, r, list, err)
		}},
		{"GET", "/metrics", access.RoleReader, a.metricsHandler().ServeHTTP},
		{"GET", "/openapi.yaml", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			w.Write(openAPIYAML)
		}},
		{"GET", "/openapi.json", "", func(w http.ResponseWriter, r *http.Request) {
			doc, err := yaml.YAMLToJSON(openAPIYAML)
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		}},
	}
}

// handler is the API and the console without credentials, as serve
// answers on loopback without a tokens file.
func (a *app) handler() http.Handler {
	return a.guardedHandler(&guard{origin: http.NewCrossOriginProtection()})
}

// guardedHandler is the HTTP API (the CLI's queries and operator actions)
// and the console, every route behind g.
func (a *app) guardedHandler(g *guard) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range a.routes() {
		mux.HandleFunc(rt.method+" "+rt.pattern, a.wrap(g, rt.need, rt.handle))
	}
	a.consoleRoutes(mux, g)
	// What no route takes: problem JSON too, 405 with Allow when the path
	// exists for other methods.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			a.problem(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED",
				fmt.Sprintf("%s takes %s, not %s", r.URL.Path, strings.Join(allow, ", "), r.Method))
			return
		}
		a.problem(w, r, http.StatusNotFound, string(runstate.CodeNotFound), fmt.Sprintf("no operation %s %s; /openapi.json lists them", r.Method, r.URL.Path))
	})
	return mux
}

// operatorFor is the operator acting in r: the authenticated principal
// when serve has credentials, recorded as the writes' principal too
// (AUD-010), else the user running serve, without a principal.
func (a *app) operatorFor(r *http.Request) tracker.Operator {
	op := a.operator
	if p, ok := principalOf(r); ok {
		op.Actor.ID, op.Actor.Principal = p.Name, p.Name
	}
	return op
}

// listParams reads GET /runs's query.
func listParams(r *http.Request) (runstate.ListRunsParams, error) {
	q := r.URL.Query()
	p := runstate.ListRunsParams{WorkflowName: q.Get("workflow"), Cursor: q.Get("cursor")}
	if s := q.Get("status"); s != "" {
		p.Statuses = strings.Split(s, ",")
	}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return p, runstate.InvalidArgument("label", "%q is not key=value", l)
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return p, runstate.InvalidArgument("limit", "%q is not a number", l)
		}
		p.Limit = n
	}
	return p, nil
}

// cancelReason reads the reason of a cancel: a JSON body {"reason": "…"}
// or the reason query parameter, as the CLI's --reason.
func cancelReason(r *http.Request) (string, error) {
	reason := r.URL.Query().Get("reason")
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" {
		var body struct {
			Reason string `json:"reason"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			return "", runstate.InvalidArgument("body", "want {\"reason\": \"why\"}: %v", err)
		}
		if body.Reason != "" && reason != "" && body.Reason != reason {
			return "", runstate.InvalidArgument("reason", "given twice, differently, in the body and the query")
		}
		if body.Reason != "" {
			reason = body.Reason
		}
	}
	if reason == "" {
		reason = "canceled by an operator"
	}
	return reason, nil
}

// runList is a page of runs as the CLI and the API print it.
type runList struct {
	Runs       []runstate.RunSnapshot `json:"runs"`
	NextCursor string                 `json:"next_cursor,omitempty"`
}

// newRunList prints an empty page as "runs": [], never null.
func newRunList(page runstate.RunPage) runList {
	if page.Runs == nil {
		page.Runs = []runstate.RunSnapshot{}
	}
	return runList{page.Runs, page.NextCursor}
}

// serve answers the console and the API on o.addr until ctx ends.
func (a *app) serve(ctx context.Context, o serveOptions) error {
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		return exitError{Code: exitFailure, Msg: err.Error()}
	}
	return a.serveListener(ctx, o, lis)
}

// serveListener answers on lis, with o's TLS and credentials.
func (a *app) serveListener(ctx context.Context, o serveOptions, lis net.Listener) error {
	g, err := newGuard(o)
	if err != nil {
		lis.Close()
		return err
	}
	tlsConf, err := o.loadTLS()
	if err != nil {
		lis.Close()
		return err
	}
	scheme := "http"
	if tlsConf != nil {
		lis, scheme = tls.NewListener(lis, tlsConf), "https"
	}
	a.liveEvery, a.livePollOnly = o.liveEvery, o.livePollOnly
	a.log.Info("serving", "addr", lis.Addr().String(), "console", scheme+"://"+lis.Addr().String()+"/ui/",
		"credentials", g.tokens != nil, "live_runs", a.liveMode(a.runWatcher != nil), "live_list", a.liveMode(a.watcher != nil), "live_every", a.liveEvery)
	return a.serveOn(ctx, lis, a.guardedHandler(g))
}

// liveMode says how the console's live pages follow the store: "watch"
// when it announces changes (and polling too, as a safety net), else
// "poll".
func (a *app) liveMode(announces bool) string {
	if announces && !a.livePollOnly {
		return "watch"
	}
	return "poll"
}

// serveOn answers h on lis until ctx ends.
func (a *app) serveOn(ctx context.Context, lis net.Listener, h http.Handler) error {
	// Requests share ctx, so that the console's live streams end with it
	// rather than hold Shutdown up.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return exitError{Code: exitFailure, Msg: err.Error()}
	}
	return nil
}

func (a *app) metricsHandler() http.Handler {
	return promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{})
}

// serveMetrics answers /metrics alone on lis until ctx ends (a worker's).
func (a *app) serveMetrics(ctx context.Context, lis net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metricsHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	srv.Serve(lis)
}

// reply writes v as JSON, or err as problem JSON.
func (a *app) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		code := string(runstate.CodeOf(err))
		status, ok := httpStatus[runstate.CodeOf(err)]
		switch {
		case errors.Is(err, tracker.ErrFinished):
			code, status, ok = codeRunFinished, http.StatusConflict, true
		case errors.Is(err, tracker.ErrNotWaiting):
			code, status, ok = codeRunNotWaiting, http.StatusConflict, true
		case errors.As(err, new(notRetryable)):
			code, status, ok = codeRunNotRetryable, http.StatusConflict, true
		}
		if !ok {
			code, status = codeInternal, http.StatusInternalServerError
			a.log.Error("API call failed", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		a.problem(w, r, status, code, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// problem is an RFC 9457 problem detail carrying the contract's error code.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
	Code     string `json:"code"`
}

func (a *app) problem(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Instance: r.URL.Path, Code: code})
}
