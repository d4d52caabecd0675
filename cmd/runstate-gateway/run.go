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
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/plugin"
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
	fs := flag.NewFlagSet("runstate-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageText); fs.PrintDefaults() }
	listen := fs.String("listen", "127.0.0.1:7443", "address to serve on (host:port; port 0 picks one)")
	storeName := fs.String("store", "", "the store: memory, badger:PATH, mysql:DSN or plugin:PATH (default $"+envStore+": keeps a DSN's password off the command line)")
	tokensPath := fs.String("tokens", "", "the tokens file (principals, roles, token hashes); SIGHUP reloads it")
	certFile := fs.String("tls-cert", "", "the server certificate (PEM)")
	keyFile := fs.String("tls-key", "", "the server certificate's key (PEM)")
	clientCA := fs.String("client-ca", "", "CA certificates (PEM) that sign client certificates: mutual TLS")
	plaintext := fs.Bool("plaintext", false, "serve without TLS, on a loopback address only")
	maxMessage := fs.Int("max-message-bytes", gateway.DefaultMaxMessageBytes, "largest request or response")
	metricsListen := fs.String("metrics-listen", "", "address of a plain HTTP server of /metrics (Prometheus); off when empty")
	if err := cli.Parse(fs, args, exitOK, exitUsage); err != nil {
		return err
	}
	if *storeName == "" {
		*storeName = os.Getenv(envStore)
	}
	if *storeName == "" || *tokensPath == "" {
		return cli.Errorf(exitUsage, "--store (or $%s) and --tokens are required", envStore)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	tokens, err := gateway.LoadTokens(*tokensPath)
	if err != nil {
		return cli.Errorf(exitUsage, "%v", err)
	}
	opts := gateway.ServerOptions{Tokens: tokens, Logger: log, MaxMessageBytes: *maxMessage}
	switch {
	case *plaintext && (*certFile != "" || *keyFile != "" || *clientCA != ""):
		return cli.Errorf(exitUsage, "--plaintext and TLS flags exclude each other")
	case *plaintext:
		if err := gateway.LoopbackOnly(*listen); err != nil {
			return cli.Errorf(exitUsage, "%v", err)
		}
		log.Warn("serving without TLS: only this machine can reach the gateway", "listen", *listen)
	case *certFile == "" || *keyFile == "":
		return cli.Errorf(exitUsage, "TLS is required: give --tls-cert and --tls-key (or --plaintext on a loopback address)")
	default:
		if opts.TLS, err = gateway.ServerTLS(*certFile, *keyFile, *clientCA); err != nil {
			return cli.Errorf(exitUsage, "%v", err)
		}
	}
	store, closeStore, err := openStore(ctx, *storeName, log)
	if err != nil {
		return err
	}
	defer closeStore()
	opts.Store = store
	if *metricsListen != "" {
		reg := prometheus.NewRegistry()
		opts.Metrics = reg
		metricsLis, err := net.Listen("tcp", *metricsListen)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		metricsSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go metricsSrv.Serve(metricsLis)
		defer metricsSrv.Close()
		log.Info("metrics served", "listen", metricsLis.Addr().String())
	}
	srv, err := gateway.NewServer(opts)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Fprintln(stdout, "listening", lis.Addr().String())
	log.Info("gateway serving", "listen", lis.Addr().String(), "store", storeKind(*storeName), "principals", tokens.Len(), "tls", opts.TLS != nil)
	for {
		select {
		case err := <-served:
			return err
		case <-reload:
			next, err := gateway.LoadTokens(*tokensPath)
			if err != nil {
				log.Error("tokens not reloaded: the previous ones stay in force", "error", err)
				continue
			}
			srv.SetTokens(next)
			log.Info("tokens reloaded", "principals", next.Len())
		case <-ctx.Done():
			log.Info("gateway stopping: waiting for the calls in flight", "grace", stopGrace)
			stopCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
			srv.Stop(stopCtx)
			cancel()
			log.Info("gateway stopped")
			return nil
		}
	}
}

// openStore opens the store --store names. The gateway is its one user on
// this machine: a Badger directory is held, not shared.
func openStore(ctx context.Context, name string, log *slog.Logger) (runstate.RunStateStore, func() error, error) {
	kind, arg, _ := strings.Cut(name, ":")
	switch kind {
	case "memory":
		s, err := memory.Open(ctx, memory.Options{})
		if err != nil {
			return nil, nil, err
		}
		log.Warn("serving the memory store: runs are lost when the gateway exits")
		return s, s.Close, nil
	case "badger":
		s, err := badger.Open(ctx, badger.Options{Dir: arg, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "mysql":
		s, err := mysql.Open(ctx, mysql.Options{DSN: arg, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "plugin":
		c, err := plugin.Open(ctx, arg, plugin.Options{Logger: log, Relaunch: true})
		if err != nil {
			return nil, nil, err
		}
		return c.Store(), c.Close, nil
	}
	return nil, nil, cli.Errorf(exitUsage, "--store %q: want memory, badger:PATH, mysql:DSN or plugin:PATH", storeKind(name))
}

// storeKind names a store without its argument: a DSN may hold a password.
func storeKind(name string) string {
	kind, _, _ := strings.Cut(name, ":")
	return kind
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
