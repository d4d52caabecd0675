// Command stress hunts flaky tests before CI does: it runs the
// time-sensitive tests (make stress lists them) several times each, under
// the race detector as CI runs them, while a CPU burner takes every core,
// and prints each test's failure rate. A test that fails here fails in CI
// one day: fix it at its cause (a clock the check controls, a lease that
// outlasts what the check needs, a verdict read from the store), never by
// retrying it or loosening it until it cannot fail.
//
//	go run ./internal/cmd/stress [-n N] [-budget 3m] [-pkgs ./cmd/demo-runner,...] [-run REGEXP] [-burn=false] [-out DIR]
//
// Exit codes: 0 no run failed, 1 a run failed, 2 usage error, 3 the stress
// could not run (a test binary did not build, a process could not start,
// an interruption). Through make (go run) every failure exits 1.
package main

import (
	"context"
	"io"

	"github.com/runstate/runstate/internal/cli"
)

func main() {
	cli.Main("stress", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return run(ctx, args, stdout, stderr)
	}, exitCouldNotRun)
}
