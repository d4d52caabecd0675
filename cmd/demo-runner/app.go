package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/otelstore"
	"github.com/runstate/runstate/stores"
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

type kvFlag = cli.KVFlag

// globals are the flags every command takes.
type globals struct {
	storeName, storeFile, dataDir, workerID, policy, logLevel string
	pluginConfigFile                                          string
	notify                                                    []string
	pluginConfig                                              kvFlag
	gateway                                                   stores.GatewayOptions
	lease, renew                                              time.Duration
	notifyAttempts                                            int
	notifyBackoff                                             time.Duration
	exclusive                                                 bool
	workerIDGiven                                             bool // --worker-id was given, not defaulted
}

// envStore names the variable that gives the store when neither --store
// nor --store-file does: it keeps a DSN's password out of the process list.
const envStore = "RUNSTATE_STORE"

const rootLong = `demo-runner runs workflow files on a runstate store: in the foreground, or queued and taken
by workers under leases, with crash recovery, webhooks and an HTTP API.

The store is --store, else the first line of --store-file, else $` + envStore + `, else
badger:DATA-DIR/store. A DSN with a password belongs in the file or the variable, where the
process list does not show it.

run, worker and retry run crash recovery first; queries never write. Every command works
beside the others, also on the default Badger store, which one process holds and shares with
the rest. Exit codes: 0 success, 1 the run did not succeed (or was left waiting), 2 usage
error, 3 the store or the environment failed.`

func addGlobalFlags(fs *pflag.FlagSet, g *globals) {
	fs.StringVar(&g.dataDir, "data-dir", ".runstate", "where the default store and the webhook dead letters live")
	fs.StringVar(&g.storeName, "store", "", stores.Forms()+" (default $"+envStore+", or badger:DATA-DIR/store)")
	fs.StringVar(&g.storeFile, "store-file", "", "read the store from this file's first line instead of --store (keeps a DSN's password out of ps)")
	fs.Var(g.pluginConfig, "plugin-config", "configuration of a plugin store, key=value (repeatable)")
	fs.StringVar(&g.pluginConfigFile, "plugin-config-file", "", "more plugin configuration, a key=value per line (keeps secrets out of ps; --plugin-config wins)")
	fs.StringVar(&g.gateway.CAFile, "gateway-ca", "", "CA certificates (PEM) that sign the gateway's certificate (default: the system's)")
	fs.StringVar(&g.gateway.CertFile, "gateway-cert", "", "this client's certificate (PEM), for a gateway that requires mutual TLS")
	fs.StringVar(&g.gateway.KeyFile, "gateway-key", "", "the key of --gateway-cert (PEM)")
	fs.StringVar(&g.gateway.TokenFile, "gateway-token-file", "", "file holding the gateway token (default: $"+gateway.EnvToken+")")
	fs.BoolVar(&g.gateway.Plaintext, "gateway-plaintext", false, "reach a gateway on this machine without TLS")
	fs.StringVar(&g.workerID, "worker-id", "", "this worker's name, stable across restarts and unique among live processes (default: the host name, or host-2, host-3, … when another process here has it)")
	fs.StringVar(&g.policy, "recovery", "interrupt", "crash recovery policy: interrupt, fail or takeover")
	fs.DurationVar(&g.lease, "lease", 30*time.Second, "lease duration of a run being executed, up to "+runstate.MaxLeaseTTL.String()+" (see docs/leases.md)")
	fs.DurationVar(&g.renew, "renew", 0, "lease renewal cadence (default a third of --lease)")
	fs.StringArrayVar(&g.notify, "notify", nil, "POST every state change to this http(s) URL (repeatable)")
	fs.IntVar(&g.notifyAttempts, "notify-attempts", 5, "delivery attempts per notification before it is dead-lettered")
	fs.DurationVar(&g.notifyBackoff, "notify-backoff", 200*time.Millisecond, "wait before the second delivery attempt, doubled for each further one")
	fs.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&g.exclusive, "exclusive", false, "this process is the only one using the store: allows crash recovery on a store without leases")
}

// check completes and checks the global flags, before anything opens:
// every value that cannot work is refused here, with what to give instead.
func (g *globals) check() error {
	if err := g.resolveStore(); err != nil {
		return err
	}
	if err := checkStoreName(g.storeName); err != nil {
		return err
	}
	if g.pluginConfigFile != "" {
		if err := g.pluginConfig.AddFile(g.pluginConfigFile); err != nil {
			return usageError("--plugin-config-file: %v", err)
		}
	}
	if g.lease <= 0 || g.lease > runstate.MaxLeaseTTL {
		return usageError("--lease %v: want a positive duration up to %v, such as 30s (docs/leases.md)", g.lease, runstate.MaxLeaseTTL)
	}
	if g.renew == 0 {
		g.renew = g.lease / 3
	}
	if g.renew <= 0 || g.renew >= g.lease {
		return usageError("--renew %v: want a positive duration shorter than --lease (%v); leave it out for a third of --lease", g.renew, g.lease)
	}
	if !slices.Contains([]runstate.RecoveryPolicy{runstate.RecoverInterrupt, runstate.RecoverFail, runstate.RecoverTakeover}, runstate.RecoveryPolicy(g.policy)) {
		return usageError("--recovery %q: want interrupt, fail or takeover", g.policy)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	for _, u := range g.notify {
		if err := tracker.CheckWebhookURL(u); err != nil {
			return usageError("--notify: %v", err)
		}
	}
	if g.notifyAttempts < 1 || g.notifyBackoff < 0 {
		return usageError("--notify-attempts %d and --notify-backoff %v: want at least one attempt and a backoff of 0 or more", g.notifyAttempts, g.notifyBackoff)
	}
	g.workerIDGiven = g.workerID != ""
	if stores.Parse(g.storeName).Scheme == "gateway" && !g.workerIDGiven {
		// A worker claims through a gateway in its principal's name only.
		return usageError("--store gateway:… needs --worker-id: the name of the principal whose token this worker uses")
	}
	if g.workerID == "" {
		g.workerID, _ = os.Hostname()
	}
	return nil
}

// resolveStore takes the store from --store, --store-file, $RUNSTATE_STORE
// or the default, in that order.
func (g *globals) resolveStore() error {
	switch {
	case g.storeName != "" && g.storeFile != "":
		return usageError("--store and --store-file exclude each other")
	case g.storeName != "":
		return nil
	case g.storeFile != "":
		b, err := os.ReadFile(g.storeFile)
		if err != nil {
			return usageError("--store-file: %v", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if g.storeName = strings.TrimSpace(line); g.storeName == "" {
			return usageError("--store-file %s: the first line is empty; write the store there, e.g. mysql:user:pass@tcp(host:3306)/runs", g.storeFile)
		}
	case os.Getenv(envStore) != "":
		g.storeName = os.Getenv(envStore)
	default:
		g.storeName = "badger:" + filepath.Join(g.dataDir, "store")
	}
	return nil
}

// app is what a command works with once the store is open.
type app struct {
	g          globals
	log        *slog.Logger
	runs       runstate.RunStateStore
	leases     runstate.Store           // the same store with its leases; nil when it has none
	watcher    runstate.RunnableWatcher // announces runnable runs; nil: workers poll
	wakeAt     func(time.Time)          // wakes this process's worker when a run it parked comes due; nil without one
	runWatcher runstate.RunWatcher      // announces a run's writes; nil: the console polls
	owner      runstate.Owner
	tracker    *tracker.Tracker
	operator   tracker.Operator
	metrics    *metrics
	recovery   runstate.RecoveryReport
	hooks      []*tracker.Webhook
	dead       *tracker.FileDeadLetters
	supervisor []string
	stdout     io.Writer
	closers    []func() error
	liveEvery  time.Duration // how often serve's live streams read the store
	// livePollOnly: serve's live streams ignore the store's change streams.
	livePollOnly bool
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// role says what a command needs of the store.
type role struct {
	// opensStore: the command opens the store at all.
	opensStore bool
	// hold: it runs for long, so it holds a Badger directory and shares it.
	hold bool
	// recover: it claims runs, to execute them or to settle them: crash
	// recovery runs first, and its worker id must be its own among the
	// live processes.
	recover bool
}

// start opens the store, runs crash recovery when the command takes runs
// on, and prepares the tracker.
func start(ctx context.Context, g globals, r role, stdout, stderr io.Writer) (*app, error) {
	log, err := newLogger(g.logLevel, stderr)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	rand.Read(b)
	a := &app{g: g, log: log, stdout: stdout, metrics: newMetrics(),
		owner: runstate.Owner{Worker: g.workerID, Incarnation: fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b))},
		dead:  &tracker.FileDeadLetters{Path: filepath.Join(g.dataDir, "deadletters.jsonl")}}
	if !r.opensStore {
		return a, nil
	}
	if err := os.MkdirAll(g.dataDir, 0o755); err != nil {
		return nil, exitError{Code: exitFailure, Msg: err.Error()}
	}
	if r.recover {
		id, lock, err := lockWorkerID(storeIdentity(g.storeName), g.workerID, g.workerIDGiven)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, lock.release)
		a.owner.Worker = id
	}
	traces, err := tracing.Setup(ctx, tracing.SetupParams{Service: "demo-runner", Console: stderr})
	if err != nil {
		a.close()
		return nil, usageError("%v", err)
	}
	a.closers = append(a.closers, func() error { return shutdownTracing(traces) })
	st, err := openStore(ctx, g, log, r.hold)
	if err != nil {
		a.close()
		return nil, storeError(err)
	}
	a.watcher = st.Watcher() // of the store as opened: the spans' wrapper keeps no watch
	a.runWatcher = st.RunWatcher()
	if traces.Enabled {
		st.Runs = otelstore.Wrap(st.Runs, otelstore.Options{System: tracing.DBSystem(stores.Parse(g.storeName).Scheme)})
	}
	a.runs, a.leases = st.Runs, st.Leases()
	a.closers = append([]func() error{st.Close}, a.closers...) // the worker id lock goes last, then the spans
	if r.recover {
		if a.recovery, err = a.recoverRuns(ctx); err != nil {
			a.close()
			return nil, err
		}
	}
	if exe, err := os.Executable(); err == nil {
		a.supervisor = []string{exe, workflow.SupervisorArg}
	} else {
		log.Warn("step commands run without a supervisor: they would outlive this process if it were killed", "error", err)
	}
	var notifiers []tracker.Notifier
	for _, url := range g.notify {
		h := tracker.NewWebhook(url, tracker.WebhookOptions{Attempts: g.notifyAttempts, Backoff: g.notifyBackoff, DeadLetters: a.dead, Logger: log,
			OnAttempt: a.metrics.observeDelivery})
		a.hooks = append(a.hooks, h)
		notifiers = append(notifiers, h)
	}
	notifiers = append(notifiers, a.metrics)
	a.tracker = tracker.New(a.runs, tracker.Options{Notifiers: notifiers, Logger: log,
		Actor: a.workerActor(), Leases: a.leases,
		OnRenewal: a.metrics.observeRenewal})
	a.operator = tracker.Operator{Store: a.runs, Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: operatorName()}, Notifiers: notifiers}
	a.metrics.storeGauges(a.runs, a.dead)
	return a, nil
}

// shutdownTracing exports the spans still buffered, for at most 5s.
func shutdownTracing(t tracing.Tracing) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.Shutdown(ctx)
}

// operatorName names the person behind operator commands: user@host.
func operatorName() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// workerActor is who this process's writes as a worker are by, in the audit trail.
func (a *app) workerActor() runstate.Actor {
	return runstate.Actor{Kind: runstate.ActorWorker, ID: a.owner.String()}
}

// recoverRuns runs crash recovery. On a store with leases it is safe
// beside any number of live workers; a store without them is recovered
// only when --exclusive says no other process uses it.
func (a *app) recoverRuns(ctx context.Context) (runstate.RecoveryReport, error) {
	opts := runstate.RecoveryOptions{Policy: runstate.RecoveryPolicy(a.g.policy), Owner: a.owner, Logger: a.log, OnFinish: a.metrics.observeRecovery}
	var report runstate.RecoveryReport
	var err error
	switch {
	case a.leases != nil:
		report, err = runstate.Recover(ctx, a.leases, opts)
	case a.g.exclusive:
		report, err = runstate.RecoverExclusive(ctx, a.runs, opts)
	default:
		return report, errNoLeasesNoRecovery
	}
	if err != nil {
		return report, storeError(err)
	}
	return report, nil
}

var errNoLeasesNoRecovery = exitError{Code: exitUsage, Msg: "the store has no leases, so crash recovery cannot tell a live process's " +
	"runs from a crashed one's: pass --exclusive if no other process uses this store"}

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

// storeError gives store failures their exit code; bad input, and asking
// for what is not there or not allowed, stays usage.
func storeError(err error) error {
	var e exitError
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, tracker.ErrFinished), errors.Is(err, tracker.ErrNotWaiting), errors.As(err, new(notRetryable)),
		runstate.CodeOf(err) == runstate.CodeInvalidArgument, runstate.CodeOf(err) == runstate.CodeInvalidTransition,
		runstate.CodeOf(err) == runstate.CodeNotFound:
		return exitError{Code: exitUsage, Msg: err.Error()}
	}
	return exitError{Code: exitFailure, Msg: err.Error()}
}

// printResult prints v as JSON, or gives the store's error its exit code.
func (a *app) printResult(v any, err error) error {
	if err != nil {
		return storeError(err)
	}
	return a.printJSON(v)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
