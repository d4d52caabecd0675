package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/otelstore"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/stores"
	_ "github.com/runstate/runstate/stores/all" // every store kind --store names
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the gateway could not start or serve
	exitUsage   = 2 // the command line is wrong
)

func exitCode(err error, stderr io.Writer) int {
	var exit cli.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exit):
		if exit.Msg != "" {
			fmt.Fprintln(stderr, "runstate-gateway:", exit.Msg)
		}
		return exit.Code
	}
	fmt.Fprintln(stderr, "runstate-gateway:", err)
	return exitFailure
}

const usageText = `runstate-gateway serves a runstate store to workers on other machines (docs/gateway.md).

Usage:
  runstate-gateway --store STORE --tokens FILE (--tls-cert F --tls-key F [--client-ca F] | --plaintext) [flags]
  runstate-gateway gen-token       print a new token, then its token_sha256 for the tokens file
  runstate-gateway hash-token      print the token_sha256 of the token on stdin
  runstate-gateway version         print the kit's version, the protocol's and its features (--format json)

Flags:
`

// envStore names the variable that gives the store when --store does not.
const envStore = "RUNSTATE_GATEWAY_STORE"

// stopGrace bounds how long a stop waits for the calls in flight.
const stopGrace = 30 * time.Second

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, reload <-chan os.Signal) error {
	if len(args) > 0 && args[0] == "hash-token" {
		return hashToken(stdin, stdout)
	}
	if len(args) > 0 && args[0] == "gen-token" {
		return genToken(stdout)
	}
	if len(args) > 0 && args[0] == "version" {
		return printVersion(args[1:], stdout, stderr)
	}
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	opts, err := f.serverOptions(log)
	if err != nil {
		return err
	}
	traces, err := tracing.Setup(ctx, tracing.SetupParams{Service: "runstate-gateway", Console: stderr})
	if err != nil {
		return cli.ExitError{Code: exitUsage, Msg: err.Error()}
	}
	defer shutdownTracing(traces, log)
	// The gateway is the store's one user on this machine: a Badger
	// directory is held, not shared; a plugin that dies is started again.
	// On PostgreSQL its clients' submissions and releases wake watching
	// workers (LISTEN/NOTIFY), its own clients' and any other handle's.
	clock, err := testClock(f.storeName, log)
	if err != nil {
		return cli.ExitError{Code: exitUsage, Msg: err.Error()}
	}
	opened, err := stores.Open(ctx, f.storeName, stores.Options{Logger: log, NotifyRunnable: true, NotifyRuns: true,
		Plugin: stores.PluginOptions{Relaunch: true, AcceptNoPrincipal: f.acceptNoPrincipal}, Clock: clock.Clock()})
	if err != nil {
		return err
	}
	defer opened.Close()
	opts.Store, opts.Watcher, opts.RunWatcher, opts.TestClock = opened.Runs, opened.Watcher(), opened.RunWatcher(), clock
	if traces.Enabled {
		// The store calls the gateway makes for its callers, as children
		// of their calls' server spans.
		opts.Store = otelstore.Wrap(opened.Runs, otelstore.Options{System: tracing.DBSystem(stores.Parse(f.storeName).Scheme)})
	}
	if f.metricsListen != "" {
		stopMetrics, err := serveMetrics(f.metricsListen, &opts, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	srv, err := gateway.NewServer(opts)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Fprintln(stdout, "listening", lis.Addr().String())
	log.Info("gateway serving", "listen", lis.Addr().String(), "store", stores.Redact(f.storeName),
		"principals", opts.Tokens.Len(), "tls", opts.TLS != nil)
	return serveUntilStopped(ctx, serving{srv: srv, served: served, reload: reload, tokensPath: f.tokensPath, log: log})
}

// testClock is the test clock gateway.TestClockEnv asks for (nil when
// unset), for a store that reads it (gateway.CheckTestClock).
func testClock(storeName string, log *slog.Logger) (*protocol.TestClock, error) {
	clock, err := protocol.TestClockOfEnv(gateway.TestClockEnv)
	if err != nil || clock == nil {
		return nil, err
	}
	if err := gateway.CheckTestClock(storeName); err != nil {
		return nil, fmt.Errorf("%w: unset it, or serve the store itself", err)
	}
	log.Warn("test mode: the store's clock stands still and operators move it; for certification only", "env", gateway.TestClockEnv, "at", clock.Now())
	return clock, nil
}

// shutdownTracing exports the spans still buffered, for at most 5s.
func shutdownTracing(t tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("exporting the last spans failed", "error", err)
	}
}

// flags are the gateway's command line.
type flags struct {
	listen, storeName, tokensPath string
	certFile, keyFile, clientCA   string
	plaintext                     bool
	acceptNoPrincipal             bool
	maxMessage                    int
	metricsListen                 string
}

// parseFlags parses and checks the command line, the store's name
// included, before anything is read or opened.
func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("runstate-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageText); fs.PrintDefaults() }
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7443", "address to serve on (host:port; port 0 picks one)")
	fs.StringVar(&f.storeName, "store", "", "the store: "+stores.Forms()+" (default $"+envStore+": keeps a DSN's password off the command line)")
	fs.StringVar(&f.tokensPath, "tokens", "", "the tokens file (principals, roles, token hashes); SIGHUP reloads it")
	fs.StringVar(&f.certFile, "tls-cert", "", "the server certificate (PEM)")
	fs.StringVar(&f.keyFile, "tls-key", "", "the server certificate's key (PEM)")
	fs.StringVar(&f.clientCA, "client-ca", "", "CA certificates (PEM) that sign client certificates: mutual TLS")
	fs.BoolVar(&f.plaintext, "plaintext", false, "serve without TLS, on a loopback address only")
	fs.BoolVar(&f.acceptNoPrincipal, "accept-trail-without-principals", false,
		"with a plugin store of protocol 1.5 or older, which cannot record principals, write without them instead of refusing writes (the audit trail then does not say who made them)")
	fs.IntVar(&f.maxMessage, "max-message-bytes", gateway.DefaultMaxMessageBytes, "largest request or response")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "address of a plain HTTP server of /metrics (Prometheus); off when empty")
	if err := cli.Parse(fs, args, exitOK, exitUsage); err != nil {
		return f, err
	}
	if f.storeName == "" {
		f.storeName = os.Getenv(envStore)
	}
	if f.storeName == "" || f.tokensPath == "" {
		return f, cli.Errorf(exitUsage, "--store (or $%s) and --tokens are required", envStore)
	}
	if err := stores.Check(f.storeName); err != nil {
		return f, cli.Errorf(exitUsage, "--store %s", runstate.MessageOf(err))
	}
	return f, nil
}

// serverOptions loads the tokens and the TLS configuration the flags name.
func (f flags) serverOptions(log *slog.Logger) (gateway.ServerOptions, error) {
	tokens, err := gateway.LoadTokens(f.tokensPath)
	if err != nil {
		return gateway.ServerOptions{}, cli.Errorf(exitUsage, "%v", err)
	}
	opts := gateway.ServerOptions{Tokens: tokens, Logger: log, MaxMessageBytes: f.maxMessage}
	switch {
	case f.plaintext && (f.certFile != "" || f.keyFile != "" || f.clientCA != ""):
		return opts, cli.Errorf(exitUsage, "--plaintext and TLS flags exclude each other")
	case f.plaintext:
		if err := gateway.LoopbackOnly(f.listen); err != nil {
			return opts, cli.Errorf(exitUsage, "%v", err)
		}
		log.Warn("serving without TLS: only this machine can reach the gateway", "listen", f.listen)
	case f.certFile == "" || f.keyFile == "":
		return opts, cli.Errorf(exitUsage, "TLS is required: give --tls-cert and --tls-key (or --plaintext on a loopback address)")
	default:
		if opts.TLS, err = gateway.ServerTLS(f.certFile, f.keyFile, f.clientCA); err != nil {
			return opts, cli.Errorf(exitUsage, "%v", err)
		}
	}
	return opts, nil
}

// serveMetrics serves /metrics on addr from a registry it puts in opts;
// stop closes the server.
func serveMetrics(addr string, opts *gateway.ServerOptions, log *slog.Logger) (stop func() error, err error) {
	reg := prometheus.NewRegistry()
	opts.Metrics = reg
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	log.Info("metrics served", "listen", lis.Addr().String())
	return srv.Close, nil
}

// serving is a gateway that serves, and what may stop it or reload its tokens.
type serving struct {
	srv        *gateway.Server
	served     <-chan error
	reload     <-chan os.Signal
	tokensPath string
	log        *slog.Logger
}

// serveUntilStopped reloads the tokens on every signal from reload, and
// stops the gateway when ctx ends, after the calls in flight.
func serveUntilStopped(ctx context.Context, s serving) error {
	for {
		select {
		case err := <-s.served:
			return err
		case <-s.reload:
			next, err := gateway.LoadTokens(s.tokensPath)
			if err != nil {
				s.log.Error("tokens not reloaded: the previous ones stay in force", "error", err)
				continue
			}
			s.srv.SetTokens(next)
			s.log.Info("tokens reloaded", "principals", next.Len())
		case <-ctx.Done():
			s.log.Info("gateway stopping: waiting for the calls in flight", "grace", stopGrace)
			stopCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
			s.srv.Stop(stopCtx)
			cancel()
			s.log.Info("gateway stopped")
			return nil
		}
	}
}

// printVersion prints the kit's version, the protocol's version and the
// protocol's features, as text or JSON (--format).
func printVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("runstate-gateway version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "text", "stdout format: text or json")
	if err := cli.Parse(fs, args, exitOK, exitUsage); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Errorf(exitUsage, "version takes no arguments, got %q", fs.Arg(0))
	}
	if err := buildinfo.CheckFormat(*format); err != nil {
		return cli.Errorf(exitUsage, "%v", err)
	}
	return buildinfo.Current().Write(stdout, *format)
}

// hashToken prints the token_sha256 of the token on stdin's first line.
func hashToken(stdin io.Reader, stdout io.Writer) error {
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	token := strings.TrimSpace(line)
	if len(token) < minTokenLen {
		return cli.Errorf(exitUsage, "hash-token reads the token from stdin; a token has at least %d characters (gen-token makes one)", minTokenLen)
	}
	fmt.Fprintln(stdout, gateway.HashToken(token))
	return nil
}

// minTokenLen keeps guessable tokens out of a tokens file: gen-token's have
// 64 hex digits (256 bits).
const minTokenLen = 32

// genToken prints a new random token and, on the next line, its
// token_sha256 for the tokens file.
func genToken(stdout io.Writer) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	token := hex.EncodeToString(b)
	fmt.Fprintln(stdout, token)
	fmt.Fprintln(stdout, gateway.HashToken(token))
	return nil
}
