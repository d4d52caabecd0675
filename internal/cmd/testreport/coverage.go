package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/rulecov"
)

// The stores every rule is proven against, in both clock modes, in the
// order the table lists them.
var stores = []string{"memory", "badger", "mysql", "postgres", "etcd"}

// The paths besides in-process, in the order the table lists them.
var paths = []string{"grpc", "plugin", "gateway", rulecov.PathMatrix, rulecov.PathNode, rulecov.PathGuide, rulecov.PathRunner}

var pathTitles = map[string]string{
	"in-process":       "in-process",
	"grpc":             "protocol over in-process gRPC",
	"plugin":           "plugin process",
	"gateway":          "gateway (in-process and as a process)",
	rulecov.PathMatrix: "compatibility matrix (internal/compat), a column per cell",
	rulecov.PathNode:   "the Node.js plugin (examples/node-plugin)",
	rulecov.PathGuide:  "docs/integrators.md as written (examples/filestore)",
	rulecov.PathRunner: "conformance-runner certify, in its own tests",
}

// A run is one rule run read from the output, classified.
type ruleRun struct {
	rule, store, path, cell, clock, outcome string
	faults                                  []string
	pkg, test                               string
}

type coverage struct {
	runs []ruleRun
	// passed are the top-level tests that passed, "package.Test".
	passed []string
}

func coverageOf(events []event) coverage {
	var c coverage
	for _, ev := range events {
		if ev.Action == "pass" && ev.Test != "" && !strings.Contains(ev.Test, "/") {
			c.passed = append(c.passed, ev.Package+"."+ev.Test)
		}
		if ev.Action != "output" {
			continue
		}
		e, ok := rulecov.Parse(ev.Output)
		if !ok {
			continue
		}
		c.runs = append(c.runs, ruleRun{rule: e.Rule, store: storeOf(e.Target), path: pathOf(e), cell: e.Cell,
			clock: e.Clock, outcome: e.Outcome, faults: e.Faults, pkg: ev.Package, test: ev.Test})
	}
	return c
}

// pathOf names how the rule reached the store: by the entry's own word,
// or by the target's name as the harnesses give it.
func pathOf(e rulecov.Entry) string {
	switch {
	case e.Path != "":
		return e.Path
	case strings.Contains(e.Target, "(plugin process)"):
		return "plugin"
	case strings.Contains(e.Target, "(in-process gRPC)"):
		return "grpc"
	case strings.Contains(e.Target, "gateway"):
		return "gateway"
	}
	return "in-process"
}

// storeOf is the store a target's name starts with: "badger (plugin
// process)" is badger.
func storeOf(target string) string {
	name, _, _ := strings.Cut(target, " ")
	return strings.ToLower(name)
}

// proven reports whether the run proved its rule: a pass. A skip proves
// nothing, and a failure of a deliberately broken target neither.
func (r ruleRun) proven() bool { return r.outcome == string(conformance.Pass) }

// isStore reports whether the run's store is one of the reference stores
// (the others are the suite's own mutants and examples).
func (r ruleRun) isStore() bool { return slices.Contains(stores, r.store) }

// proofs is what a run of the suite proves, as keys that a later run
// must keep:
//   - store: a rule against a reference store in a clock mode (under a
//     fault, for a rule that needs one), by any path;
//   - path: a rule through a path in a clock mode, with any store;
//   - cell: a rule in a cell of a path divided into cells (the matrix);
//   - test: a top-level test that passed, so that no test is dropped
//     unseen (a test renamed or removed on purpose is taken out of the
//     baseline with it).
type proofs map[string]bool

func (c coverage) proofs() proofs {
	p := proofs{}
	for _, t := range c.passed {
		p["test "+t] = true
	}
	for _, r := range c.runs {
		if !r.proven() {
			continue
		}
		faults := r.faults
		if len(faults) == 0 {
			faults = []string{""}
		}
		for _, f := range faults {
			suffix := ""
			if f != "" {
				suffix = " under " + f
			}
			if r.isStore() {
				p[fmt.Sprintf("store %s: %s, %s clock%s", r.rule, r.store, r.clock, suffix)] = true
			}
			p[fmt.Sprintf("path %s: %s, %s clock%s", r.rule, r.path, r.clock, suffix)] = true
			if r.cell != "" {
				p[fmt.Sprintf("cell %s: %s %s", r.rule, r.path, r.cell)] = true
			}
		}
	}
	return p
}

func (p proofs) save(path string) error {
	b, err := json.MarshalIndent(slices.Sorted(maps.Keys(p)), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func loadProofs(path string) (proofs, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []string
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("%s: not a file testreport -save wrote: %v", path, err)
	}
	p := proofs{}
	for _, k := range keys {
		p[k] = true
	}
	return p, nil
}

// missingFrom lists the proofs of p that now lacks.
func (p proofs) missingFrom(now proofs) []string {
	var out []string
	for k := range p {
		if !now[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// unproven lists the rules that passed against no store by any path.
func (c coverage) unproven() []string {
	passed := map[string]bool{}
	for _, r := range c.runs {
		if r.proven() {
			passed[r.rule] = true
		}
	}
	var out []string
	for _, r := range conformance.Rules() {
		if !passed[r.ID] {
			out = append(out, r.ID)
		}
	}
	return out
}

// clocks are the clock modes a set of runs proved a rule in: "c r", "c", "r".
func clocks(runs []ruleRun) string {
	var c, r bool
	for _, x := range runs {
		c = c || x.clock == rulecov.Controlled
		r = r || x.clock == rulecov.Real
	}
	switch {
	case c && r:
		return "c r"
	case c:
		return "c"
	case r:
		return "r"
	}
	return ""
}

// byRule groups the proving runs by rule.
func (c coverage) byRule() map[string][]ruleRun {
	out := map[string][]ruleRun{}
	for _, r := range c.runs {
		if r.proven() {
			out[r.rule] = append(out[r.rule], r)
		}
	}
	return out
}

// cells are the cells a path is divided into, sorted.
func (c coverage) cells(path string) []string {
	set := map[string]bool{}
	for _, r := range c.runs {
		if r.path == path && r.cell != "" {
			set[r.cell] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
