package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runstate/runstate/spec"
	"github.com/runstate/runstate/tracker"
)

// httpStatus maps the contract's codes to HTTP.
var httpStatus = map[spec.Code]int{
	spec.CodeNotFound:         http.StatusNotFound,
	spec.CodeInvalidArgument:  http.StatusBadRequest,
	spec.CodeUnavailable:      http.StatusServiceUnavailable,
	spec.CodePermissionDenied: http.StatusForbidden,
	spec.CodeUnauthenticated:  http.StatusUnauthorized,
}

// handler is the HTTP API: the CLI's queries and operator actions.
func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, err := a.store.GetRun(r.Context(), "healthz-probe")
		if err != nil && !errors.Is(err, spec.ErrNotFound) {
			a.reply(w, nil, err)
			return
		}
		a.reply(w, map[string]string{"status": "ok"}, nil)
	})
	mux.HandleFunc("GET /runs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		p := spec.ListRunsParams{WorkflowName: q.Get("workflow"), Cursor: q.Get("cursor")}
		if s := q.Get("status"); s != "" {
			p.Statuses = strings.Split(s, ",")
		}
		for _, l := range q["label"] {
			k, v, _ := strings.Cut(l, "=")
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[k] = v
		}
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil {
				a.reply(w, nil, spec.InvalidArgument("limit", "%q is not a number", l))
				return
			}
			p.Limit = n
		}
		page, err := a.store.ListRuns(r.Context(), p)
		a.reply(w, runList{page.Runs, page.NextCursor}, err)
	})
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		run, err := a.store.GetRun(r.Context(), r.PathValue("id"))
		a.reply(w, run, err)
	})
	mux.HandleFunc("GET /runs/{id}/audit", func(w http.ResponseWriter, r *http.Request) {
		events, err := a.auditTrail(r.Context(), r.PathValue("id"))
		a.reply(w, events, err)
	})
	mux.HandleFunc("POST /runs/{id}/signal", func(w http.ResponseWriter, r *http.Request) {
		run, err := a.operator.Signal(r.Context(), r.PathValue("id"))
		a.reply(w, run, err)
	})
	mux.HandleFunc("POST /runs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		reason := r.URL.Query().Get("reason")
		if reason == "" {
			reason = "canceled by an operator"
		}
		run, err := a.operator.Cancel(r.Context(), r.PathValue("id"), reason)
		a.reply(w, run, err)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

// runList is a page of runs as the CLI and the API print it.
type runList struct {
	Runs       []spec.RunSnapshot `json:"runs"`
	NextCursor string             `json:"next_cursor,omitempty"`
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

// reply writes v as JSON, or err as {"error": {"code", "message"}}.
func (a *app) reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := string(spec.CodeOf(err))
		status, ok := httpStatus[spec.CodeOf(err)]
		switch {
		case errors.Is(err, tracker.ErrFinished):
			code, status, ok = "RUN_FINISHED", http.StatusConflict, true
		case errors.Is(err, tracker.ErrNotWaiting):
			code, status, ok = "RUN_NOT_WAITING", http.StatusConflict, true
		}
		if !ok {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		v = map[string]any{"error": map[string]string{"code": code, "message": err.Error()}}
	}
	json.NewEncoder(w).Encode(v)
}
