// Command runstate-gateway serves a runstate store to workers on other
// machines: gRPC on TCP, with TLS and bearer tokens (see docs/gateway.md).
//
//	runstate-gateway --store badger:/var/lib/runstate --tokens tokens.yaml \
//	    --tls-cert gw.crt --tls-key gw.key [--client-ca clients.pem] [--listen :7443]
//	runstate-gateway gen-token               # a new token, and its token_sha256
//	runstate-gateway hash-token < token     # the token_sha256 of a token
//	runstate-gateway version [--format json] # the kit's and the protocol's versions
//
// Once it listens, it prints "listening ADDR" on stdout. SIGHUP reloads the
// tokens file; SIGINT or SIGTERM stop it after the calls in flight.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, reload)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}
