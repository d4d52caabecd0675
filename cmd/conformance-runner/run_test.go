package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
)

func exitCode(err error) int {
	var e exitError
	if errors.As(err, &e) {
		return e.code
	}
	if err != nil {
		return exitHarness
	}
	return exitPass
}

func TestMemoryPassesWithJSONReport(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--format", "json", "--run", "FSM,LEASE-001,REC"}, &stdout, &stderr)
	if code := exitCode(err); code != exitPass {
		t.Fatalf("exit %d (%v)\n%s", code, err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, stdout.String())
	}
	want := 10 + 1 + 12
	if len(rep.Results) != want || rep.Counts[conformance.Pass] != want || rep.Adapter != "memory" || rep.Suite != conformance.Version {
		t.Errorf("report: %d results, counts %v, adapter %q", len(rep.Results), rep.Counts, rep.Adapter)
	}
	if !strings.Contains(stderr.String(), "PASS  LEASE-001") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
}

func TestTextSummary(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--run", "CAS"}, &stdout, &stderr); err != nil {
		t.Fatal(err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "4 passed, 0 failed, 0 skipped, 0 errors") {
		t.Errorf("summary line missing:\n%s", stdout.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--adapter", "oracle"}, {"--run", "NOPE-999"}, {"--format", "xml"}, {"--bogus"}, {"extra"}} {
		var out, errOut bytes.Buffer
		if code := exitCode(run(context.Background(), args, &out, &errOut)); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestListRules(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--list-rules"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out.String(), "\n"); lines != len(conformance.Rules()) {
		t.Errorf("%d lines, want one per rule (%d)", lines, len(conformance.Rules()))
	}
}
