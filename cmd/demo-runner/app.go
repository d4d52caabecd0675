package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/spec"
	"github.com/runstate/runstate/tracker"
)

// Exit codes.
const (
	exitOK        = 0
	exitRunFailed = 1 // the run ended in a status other than success
	exitUsage     = 2
	exitFailure   = 3 // the store or the environment failed
)

// exitError ends the command with a code (see cli.ExitError).
type exitError = cli.ExitError

func usageError(format string, args ...any) error { return cli.Errorf(exitUsage, format, args...) }

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type kvFlag = cli.KVFlag

// globals are the flags before the subcommand.
type globals struct {
	store, dataDir, workerID, policy, logLevel string
	notify                                     listFlag
	pluginConfig                               kvFlag
	lease, renew                               time.Duration
	notifyAttempts                             int
	notifyBackoff                              time.Duration
}

const usageText = `demo-runner runs workflow files on a runstate store.

Usage: demo-runner [global flags] COMMAND [flags] [args]

Commands:
  run FILE          run a workflow in the foreground, with live progress
  submit FILE       queue a run (--priority N) for a worker
  worker            take queued runs by lease and run them until stopped
  status RUN_ID     print a run's snapshot, with steps and hosts (JSON)
  list              list runs (--status, --workflow, --label k=v, --limit, --cursor) (JSON)
  audit RUN_ID      print a run's audit trail (JSON)
  cancel RUN_ID     cancel a run
  signal RUN_ID     resume a run waiting in a wait step
  retry RUN_ID      run again, as a new run, a finished run whose diagnostic allows it
  recover           print the report of the crash recovery this start ran (JSON)
  serve             HTTP JSON API, Prometheus /metrics and /healthz
  deadletters       list webhook notifications that could not be delivered (JSON)

Every start runs crash recovery first. Exit codes: 0 success, 1 the run did not
succeed, 2 usage error, 3 the store or the environment failed.

Global flags:
`

func parseGlobals(args []string, stderr io.Writer) (globals, []string, error) {
	g := globals{pluginConfig: kvFlag{}}
	fs := flag.NewFlagSet("demo-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageText); fs.PrintDefaults() }
	fs.StringVar(&g.dataDir, "data-dir", ".runstate", "where the default store and the webhook dead letters live")
	fs.StringVar(&g.store, "store", "", "memory, badger:PATH, mysql:DSN or plugin:PATH (default badger:DATA-DIR/store)")
	fs.Var(g.pluginConfig, "plugin-config", "configuration of a plugin store, key=value (repeatable)")
	fs.StringVar(&g.workerID, "worker-id", "", "this worker's name, stable across restarts and unique among live workers (default: host name)")
	fs.StringVar(&g.policy, "recovery", "interrupt", "crash recovery policy: interrupt, fail or takeover")
	fs.DurationVar(&g.lease, "lease", 30*time.Second, "lease duration of a run being executed (see docs/leases.md)")
	fs.DurationVar(&g.renew, "renew", 0, "lease renewal cadence (default a third of --lease)")
	fs.Var(&g.notify, "notify", "POST every state change to this URL (repeatable)")
	fs.IntVar(&g.notifyAttempts, "notify-attempts", 5, "delivery attempts per notification before it is dead-lettered")
	fs.DurationVar(&g.notifyBackoff, "notify-backoff", 200*time.Millisecond, "wait before the second delivery attempt, doubled for each further one")
	fs.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := cli.Parse(fs, args, exitOK, exitUsage); err != nil {
		return g, nil, err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return g, nil, usageError("name a command")
	}
	if g.store == "" {
		g.store = "badger:" + filepath.Join(g.dataDir, "store")
	}
	if g.renew == 0 {
		g.renew = g.lease / 3
	}
	if g.lease <= 0 || g.renew <= 0 || g.renew >= g.lease {
		return g, nil, usageError("--renew (%v) must be positive and shorter than --lease (%v)", g.renew, g.lease)
	}
	if g.workerID == "" {
		g.workerID, _ = os.Hostname()
	}
	return g, fs.Args(), nil
}

// app is what a command works with once the store is open and recovered.
type app struct {
	g        globals
	log      *slog.Logger
	store    spec.RunStateStore
	leases   spec.LeaseStore // nil when the store has none
	owner    spec.Owner
	tracker  *tracker.Tracker
	metrics  *metrics
	recovery spec.RecoveryReport
	hooks    []*tracker.Webhook
	dead     *tracker.FileDeadLetters
	stdout   io.Writer
	closers  []func() error
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// start opens the store, runs crash recovery and prepares the tracker.
func start(ctx context.Context, g globals, stdout, stderr io.Writer) (*app, error) {
	log, err := newLogger(g.logLevel, stderr)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	rand.Read(b)
	a := &app{g: g, log: log, stdout: stdout, metrics: newMetrics(),
		owner: spec.Owner{Worker: g.workerID, Incarnation: fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b))},
		dead:  &tracker.FileDeadLetters{Path: filepath.Join(g.dataDir, "deadletters.jsonl")}}
	if err := os.MkdirAll(g.dataDir, 0o755); err != nil {
		return nil, exitError{Code: exitFailure, Msg: err.Error()}
	}
	st, err := openStore(ctx, g.store, g.pluginConfig, log)
	if err != nil {
		return nil, err
	}
	a.store, a.closers = st, append(a.closers, st.close)
	a.leases, _ = st.RunStateStore.(spec.LeaseStore)
	a.recovery, err = spec.Recover(ctx, a.store, spec.RecoveryOptions{Policy: spec.RecoveryPolicy(g.policy), Owner: a.owner,
		Logger: log, OnFinish: a.metrics.observeRecovery})
	if err != nil {
		a.close()
		return nil, storeError(err)
	}
	var notifiers []tracker.Notifier
	for _, url := range g.notify {
		h := tracker.NewWebhook(url, tracker.WebhookOptions{Attempts: g.notifyAttempts, Backoff: g.notifyBackoff, DeadLetters: a.dead, Logger: log})
		a.hooks = append(a.hooks, h)
		notifiers = append(notifiers, h)
	}
	a.tracker = tracker.New(a.store, tracker.Options{Notifiers: append(notifiers, a.metrics), Logger: log,
		Actor: spec.Actor{Kind: spec.ActorWorker, ID: a.owner.String()}})
	return a, nil
}

// close delivers what notifications it can within 10s, then closes the store.
func (a *app) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range a.hooks {
		h.Close(ctx)
	}
	for _, c := range a.closers {
		if err := c(); err != nil {
			a.log.Warn("closing", "error", err)
		}
	}
}

// storeError gives store failures their exit code; bad input stays usage.
func storeError(err error) error {
	var e exitError
	switch {
	case errors.As(err, &e):
		return err
	case spec.CodeOf(err) == spec.CodeInvalidArgument, spec.CodeOf(err) == spec.CodeInvalidTransition,
		spec.CodeOf(err) == spec.CodeNotFound:
		// The caller asked for something that is not there or not allowed.
		return exitError{Code: exitUsage, Msg: err.Error()}
	}
	return exitError{Code: exitFailure, Msg: err.Error()}
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// metrics are the Prometheus series serve exposes.
type metrics struct {
	reg          *prometheus.Registry
	recovered    *prometheus.CounterVec
	recoveryTime prometheus.Histogram
	transitions  *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_recovery_runs_total",
			Help: "Runs crash recovery considered, by outcome (interrupted, failed, requeued, skipped)."}, []string{"outcome"}),
		recoveryTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "runstate_recovery_duration_seconds",
			Help: "How long crash recovery took.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_run_status_changes_total",
			Help: "Run state changes this process wrote, by resulting status."}, []string{"status"}),
	}
	m.reg.MustRegister(m.recovered, m.recoveryTime, m.transitions, collectors.NewGoCollector())
	return m
}

func (m *metrics) observeRecovery(r spec.RecoveryReport) {
	m.recovered.WithLabelValues("interrupted").Add(float64(r.Interrupted))
	m.recovered.WithLabelValues("failed").Add(float64(r.Failed))
	m.recovered.WithLabelValues("requeued").Add(float64(r.Requeued))
	m.recovered.WithLabelValues("skipped").Add(float64(r.Skipped))
	m.recoveryTime.Observe(r.Duration.Seconds())
}

// Notify counts state changes (metrics is a tracker.Notifier).
func (m *metrics) Notify(ev tracker.Event) { m.transitions.WithLabelValues(ev.Status).Inc() }
