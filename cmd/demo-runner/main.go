// Command demo-runner runs workflow files on any runstate store: in the
// foreground, or queued and taken by workers under leases; with crash
// recovery at every start, webhooks, and an HTTP API.
//
// Exit codes: 0 success, 1 the run did not succeed, 2 usage error,
// 3 the store or the environment failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var exit exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(os.Stderr, "demo-runner:", exit.msg)
		}
		os.Exit(exit.code)
	default:
		fmt.Fprintln(os.Stderr, "demo-runner:", err)
		os.Exit(exitFailure)
	}
}
