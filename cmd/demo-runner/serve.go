package main

import (
	"context"
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
}

// Codes of the API's own refusals, beside the contract's.
const (
	codeRunFinished   = "RUN_FINISHED"    // cancel or signal a run that has ended
	codeRunNotWaiting = "RUN_NOT_WAITING" // signal a run that waits for nothing
	codeInternal      = "INTERNAL"        // a failure with no code of its own
)

// route is one operation of the API.
type route struct {
	method, pattern string
	handle          http.HandlerFunc
}

// routes are the API's operations; openapi.yaml describes exactly these.
func (a *app) routes() []route {
	return []route{
		{"GET", "/healthz", func(w http.ResponseWriter, r *http.Request) {
			_, err := a.runs.GetRun(r.Context(), "healthz-probe")
			if err != nil && !errors.Is(err, runstate.ErrNotFound) {
				a.reply(w, r, nil, err)
				return
			}
			a.reply(w, r, map[string]string{"status": "ok"}, nil)
		}},
		{"GET", "/runs", func(w http.ResponseWriter, r *http.Request) {
			p, err := listParams(r)
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			page, err := a.runs.ListRuns(r.Context(), p)
			a.reply(w, r, newRunList(page), err)
		}},
		{"GET", "/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
			run, err := a.runs.GetRun(r.Context(), r.PathValue("id"))
			a.reply(w, r, run, err)
		}},
		{"GET", "/runs/{id}/audit", func(w http.ResponseWriter, r *http.Request) {
			events, err := a.auditTrail(r.Context(), r.PathValue("id"))
			a.reply(w, r, events, err)
		}},
		{"POST", "/runs/{id}/signal", func(w http.ResponseWriter, r *http.Request) {
			run, err := a.operator.Signal(r.Context(), r.PathValue("id"))
			a.reply(w, r, run, err)
		}},
		{"POST", "/runs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
			reason, err := cancelReason(r)
			if err != nil {
				a.reply(w, r, nil, err)
				return
			}
			run, err := a.operator.Cancel(r.Context(), r.PathValue("id"), reason)
			if err == nil {
				a.metrics.observeFinished(run)
			}
			a.reply(w, r, run, err)
		}},
		{"GET", "/metrics", a.metricsHandler().ServeHTTP},
		{"GET", "/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			w.Write(openAPIYAML)
		}},
		{"GET", "/openapi.json", func(w http.ResponseWriter, r *http.Request) {
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

// handler is the HTTP API: the CLI's queries and operator actions.
func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range a.routes() {
		mux.HandleFunc(rt.method+" "+rt.pattern, rt.handle)
	}
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

// serve answers the API on addr until ctx ends.
func (a *app) serve(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return exitError{Code: exitFailure, Msg: err.Error()}
	}
	a.log.Info("serving", "addr", lis.Addr().String())
	return a.serveOn(ctx, lis)
}

func (a *app) serveOn(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}
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
