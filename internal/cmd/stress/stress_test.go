package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/runstate/runstate/internal/cli"
)

// Each test runs as often as asked; a failed run counts, keeps its log,
// and makes the exit code 1.
func TestFailureRatesAreCountedAndFailedLogsKept(t *testing.T) {
	out := t.TempDir()
	t.Setenv("STRESS_TEST_COUNTER", filepath.Join(out, "counter"))
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-n", "2", "-burn=false", "-out", out,
		"./testdata/flaky:TestPasses", "./testdata/flaky:TestFailsEveryOtherRun"}, &stdout, &stderr)
	var exit cli.ExitError
	if !errors.As(err, &exit) || exit.Code != exitFailed {
		t.Fatalf("run: %v, want exit %d\n%s", err, exitFailed, stderr.String())
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\./testdata/flaky\s+TestPasses\s+2\s+0\s+0%\s+\S+$`),
		regexp.MustCompile(`(?m)^\./testdata/flaky\s+TestFailsEveryOtherRun\s+2\s+1\s+50%\s+\S+$`),
	} {
		if !want.MatchString(stdout.String()) {
			t.Errorf("the report lacks %s:\n%s", want, stdout.String())
		}
	}
	logs, _ := filepath.Glob(filepath.Join(out, "*.log"))
	if len(logs) != 1 || !strings.Contains(logs[0], "TestFailsEveryOtherRun-1") {
		t.Fatalf("kept logs %v, want the first run of TestFailsEveryOtherRun's alone", logs)
	}
	if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), "this run fails") {
		t.Errorf("the kept log lacks the failure:\n%s", b)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "-1"},
		{"-run", "("},
		{"-pkgs", "./nowhere"},
		{"no-colon"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		var exit cli.ExitError
		if !errors.As(err, &exit) || exit.Code != exitUsage {
			t.Errorf("%v: %v, want exit %d", args, err, exitUsage)
		}
	}
}

// The orphans a test leaves are reaped as they die, not when the run
// ends: an unreaped one keeps its process group alive, and a test that
// waits for a killed server's group to empty waits for it.
func TestAdoptedOrphansAreReapedAsTheyDie(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stress adopts orphans on Linux only")
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-n", "1", "-burn=false", "-out", t.TempDir(),
		"./testdata/orphans:TestAKilledOrphanLeavesItsGroup"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s%s", err, stdout.String(), stderr.String())
	}
}
