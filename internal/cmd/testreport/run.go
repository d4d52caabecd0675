package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/runstate/runstate/internal/cli"
)

func run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("testreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonPath := fs.String("json", "", "go test's JSON output (make test's TESTJSON)")
	cpuPath := fs.String("cpu", "", "testcpu's samples (make test's TESTCPU); without it, no CPU figures")
	save := fs.String("save", "", "write what the coverage table proves to this file, as JSON")
	baseline := fs.String("baseline", "", "a file -save wrote: list the proofs it has and this run lacks")
	top := fs.Int("tests", 60, "how many of the costliest tests to list")
	strict := fs.Bool("strict", false, "fail (exit 1) when a proof of -baseline is lost or a rule ran against no store, as CI, where no test may skip, does")
	if err := cli.Parse(fs, args, 0, exitUsage); err != nil {
		return err
	}
	if *jsonPath == "" || fs.NArg() > 0 {
		return cli.Errorf(exitUsage, "usage: testreport -json FILE [-cpu FILE] [-save FILE] [-baseline FILE]")
	}
	events, err := readEvents(*jsonPath)
	if err != nil {
		return cli.Errorf(exitCannotRun, "%v", err)
	}
	var samples []sample
	if *cpuPath != "" {
		if samples, err = readSamples(*cpuPath); err != nil {
			return cli.Errorf(exitCannotRun, "%v", err)
		}
	}
	cov := coverageOf(events)
	costs := costsOf(events, samples)

	var lost []string
	if *baseline != "" {
		before, err := loadProofs(*baseline)
		if err != nil {
			return cli.Errorf(exitCannotRun, "%v", err)
		}
		lost = before.missingFrom(cov.proofs())
	}
	writeReport(stdout, cov, costs, *top, *baseline, lost)
	if *save != "" {
		if err := cov.proofs().save(*save); err != nil {
			return cli.Errorf(exitCannotRun, "%v", err)
		}
	}
	unproven := cov.unproven()
	switch {
	case !*strict:
	case len(lost) > 0:
		return cli.Errorf(exitLost, "%d proofs of %s are lost (listed in the report)", len(lost), *baseline)
	case len(unproven) > 0:
		return cli.Errorf(exitLost, "rules that ran against no store: %s", strings.Join(unproven, ", "))
	}
	return nil
}

// event is one line of go test -json.
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func readEvents(path string) ([]event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []event
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; s.Scan(); line++ {
		if len(s.Bytes()) == 0 || s.Bytes()[0] != '{' {
			continue // go test's build output, when a package did not build
		}
		var e event
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: not go test's JSON: %v", path, line, err)
		}
		out = append(out, e)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no test events", path)
	}
	return out, nil
}
