package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
)

// Exit codes.
const (
	exitPass    = 0
	exitFail    = 1
	exitUsage   = 2
	exitHarness = 3
)

// exitError carries an exit code out of run.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d: %s", e.code, e.msg) }

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// report is the machine-readable verdict (--format json).
type report struct {
	Suite        string                      `json:"suite_version"`
	Adapter      string                      `json:"adapter"`
	StoreVersion string                      `json:"adapter_version"`
	Capabilities conformance.Capabilities    `json:"capabilities"`
	Environment  map[string]string           `json:"environment"`
	Started      time.Time                   `json:"started"`
	Duration     time.Duration               `json:"duration"`
	Counts       map[conformance.Outcome]int `json:"counts"`
	Results      []conformance.Result        `json:"results"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("conformance-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	adapter := fs.String("adapter", "memory", "store to certify: memory")
	realClock := fs.Bool("real-clock", false, "memory: use the system clock, sleeping through lease TTLs")
	format := fs.String("format", "text", "output on stdout: text or json")
	listRules := fs.Bool("list-rules", false, "print every rule with its statement and exit")
	var runPats, skipPats listFlag
	fs.Var(&runPats, "run", "rule IDs or areas to run, comma-separated (default: all)")
	fs.Var(&skipPats, "skip", "rule IDs or areas to skip, comma-separated")
	if err := fs.Parse(args); err != nil {
		return exitError{code: exitUsage}
	}
	if fs.NArg() > 0 {
		return exitError{exitUsage, fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *format != "text" && *format != "json" {
		return exitError{exitUsage, fmt.Sprintf("--format %q: want text or json", *format)}
	}
	rules, err := conformance.Select(runPats, skipPats)
	if err != nil {
		return exitError{exitUsage, err.Error()}
	}
	if *listRules {
		for _, r := range rules {
			fmt.Fprintf(stdout, "%-10s %s\n", r.ID, r.Statement)
		}
		return nil
	}
	var target conformance.Target
	switch *adapter {
	case "memory":
		target = memorytest.Target(!*realClock)
	default:
		return exitError{exitUsage, fmt.Sprintf("--adapter %q: this build knows memory", *adapter)}
	}

	rep := report{Suite: conformance.Version, Adapter: target.Name, StoreVersion: target.StoreVersion,
		Capabilities: target.Capabilities, Started: time.Now().UTC(), Counts: map[conformance.Outcome]int{},
		Environment: map[string]string{"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH}}
	rep.Results = conformance.RunRules(ctx, target, rules, func(r conformance.Result) {
		fmt.Fprintf(stderr, "%-5s %-10s %v\n", strings.ToUpper(string(r.Outcome)), r.Rule.ID, r.Duration.Round(time.Millisecond))
	})
	rep.Duration = time.Since(rep.Started)
	for _, r := range rep.Results {
		rep.Counts[r.Outcome]++
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printText(stdout, rep)
	}
	switch {
	case rep.Counts[conformance.Error] > 0:
		return exitError{code: exitHarness}
	case rep.Counts[conformance.Fail] > 0:
		return exitError{code: exitFail}
	}
	return nil
}

func printText(w io.Writer, rep report) {
	fmt.Fprintf(w, "runstate conformance %s: adapter %s (%s), capabilities %+v\n\n", rep.Suite, rep.Adapter, rep.StoreVersion, rep.Capabilities)
	for _, area := range conformance.Areas {
		counts := map[conformance.Outcome]int{}
		var problems []conformance.Result
		for _, r := range rep.Results {
			if r.Rule.Area != area.ID {
				continue
			}
			counts[r.Outcome]++
			if r.Outcome == conformance.Fail || r.Outcome == conformance.Error {
				problems = append(problems, r)
			}
		}
		total := counts[conformance.Pass] + counts[conformance.Fail] + counts[conformance.Skip] + counts[conformance.Error]
		if total == 0 {
			continue
		}
		fmt.Fprintf(w, "%-6s %-30s %3d pass %3d fail %3d skip %3d error\n", area.ID, area.Title,
			counts[conformance.Pass], counts[conformance.Fail], counts[conformance.Skip], counts[conformance.Error])
		for _, r := range problems {
			fmt.Fprintf(w, "  %s %s — %s (docs/spec.md, rule %s)\n", strings.ToUpper(string(r.Outcome)), r.Rule.ID, r.Rule.Statement, r.Rule.ID)
			if r.Detail != "" {
				fmt.Fprintf(w, "    %s\n", r.Detail)
			}
			for _, f := range r.Failures {
				fmt.Fprintf(w, "    expected %s\n    saw      %s\n", f.Expected, f.Seen)
			}
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped, %d errors in %v\n", rep.Counts[conformance.Pass], rep.Counts[conformance.Fail],
		rep.Counts[conformance.Skip], rep.Counts[conformance.Error], rep.Duration.Round(time.Millisecond))
}
