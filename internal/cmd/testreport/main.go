// Command testreport reads make test's output back: which conformance
// rules ran against which stores, in which clock modes and through which
// paths, and the CPU each package and each test spent.
//
//	go run ./internal/cmd/testreport -json FILE [-cpu FILE] [-save FILE] [-baseline FILE [-strict]]
//
// -json is go test's JSON output (make test writes it to TESTJSON), in
// which tests run with RUNSTATE_RULE_COVERAGE record each rule they ran
// (internal/rulecov); -cpu the samples internal/cmd/testcpu wrote
// (TESTCPU). It prints a Markdown report on stdout: the coverage table, a
// row per rule, then CPU by package and by test. -save writes what the
// table proves as JSON; -baseline compares this run with one saved, and
// lists every proof the baseline had and this run lacks; with -strict (CI,
// where no test may skip) a lost proof fails the command.
//
// Exit codes: 0 the report is printed (with -strict: and nothing is lost
// against the baseline); 1 with -strict, a proof of the baseline is lost
// or a rule ran against no store at all; 2 usage error; 3 an input could
// not be read.
package main

import (
	"context"
	"io"

	"github.com/runstate/runstate/internal/cli"
)

const (
	exitLost      = 1
	exitUsage     = 2
	exitCannotRun = 3
)

func main() {
	cli.Main("testreport", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return run(ctx, args, stdout, stderr)
	}, exitCannotRun)
}
