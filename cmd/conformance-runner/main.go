// Command conformance-runner certifies a runstate store against the
// contract of docs/spec.md and reports the verdict per rule.
//
// Exit codes: 0 every selected rule passed (skips allowed), 1 a rule failed,
// 2 usage error, 3 the harness broke.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var exit exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(os.Stderr, "conformance-runner:", exit.msg)
		}
		os.Exit(exit.code)
	default:
		fmt.Fprintln(os.Stderr, "conformance-runner:", err)
		os.Exit(exitHarness)
	}
}
