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
)

// httpStatus maps the contract's codes to HTTP.
var httpStatus = map[spec.Code]int{
	spec.CodeNotFound:         http.StatusNotFound,
	spec.CodeInvalidArgument:  http.StatusBadRequest,
	spec.CodeUnavailable:      http.StatusServiceUnavailable,
	spec.CodePermissionDenied: http.StatusForbidden,
}

// serve answers the same queries as the CLI over HTTP until ctx ends.
func (a *app) serve(ctx context.Context, addr string) error {
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
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil {
				a.reply(w, nil, spec.InvalidArgument("limit", "%q is not a number", l))
				return
			}
			p.Limit = n
		}
		page, err := a.store.ListRuns(r.Context(), p)
		a.reply(w, map[string]any{"runs": page.Runs, "next_cursor": page.NextCursor}, err)
	})
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		run, err := a.store.GetRun(r.Context(), r.PathValue("id"))
		a.reply(w, run, err)
	})
	mux.HandleFunc("GET /runs/{id}/audit", func(w http.ResponseWriter, r *http.Request) {
		page, err := a.store.ListAuditEvents(r.Context(), spec.ListAuditParams{RunID: r.PathValue("id"), Limit: spec.MaxPageLimit})
		a.reply(w, map[string]any{"events": page.Events, "more": page.More}, err)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return exitError{exitFailure, err.Error()}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.log.Info("serving", "addr", lis.Addr().String())
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return exitError{exitFailure, err.Error()}
	}
	return nil
}

// reply writes v as JSON, or err as {"error": {"code", "message"}}.
func (a *app) reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status, ok := httpStatus[spec.CodeOf(err)]
		if !ok {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		v = map[string]any{"error": map[string]string{"code": string(spec.CodeOf(err)), "message": err.Error()}}
	}
	json.NewEncoder(w).Encode(v)
}
