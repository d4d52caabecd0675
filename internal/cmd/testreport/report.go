package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/rulecov"
)

// storeCodes abbreviate stores in the path columns.
var storeCodes = map[string]string{"memory": "m", "badger": "b", "mysql": "y", "postgres": "p", "etcd": "e"}

func code(store string) string {
	if c, ok := storeCodes[store]; ok {
		return c
	}
	return store
}

func writeReport(w io.Writer, cov coverage, c costs, top int, baseline string, lost []string) {
	writeCoverage(w, cov)
	if baseline != "" {
		fmt.Fprintf(w, "\n## Against %s\n\n", baseline)
		if len(lost) == 0 {
			fmt.Fprintf(w, "Nothing lost: every proof of the baseline is made in this run too.\n")
		} else {
			fmt.Fprintf(w, "%d proofs lost:\n\n", len(lost))
			for _, l := range lost {
				fmt.Fprintf(w, "- %s\n", l)
			}
		}
	}
	writeCosts(w, c, top)
}

func writeCoverage(w io.Writer, cov coverage) {
	byRule := cov.byRule()
	fmt.Fprintf(w, "# What make test proves, and what it costs\n\n## Rules by store, clock mode and path\n\n")
	fmt.Fprintf(w, "A rule counts where it passed; a skip proves nothing. `c` is the controlled clock, `r` the real one.\n")
	fmt.Fprintf(w, "Store columns: the rule in-process against that store (faults included). Path columns: the stores it reached\n")
	fmt.Fprintf(w, "that way (%s), with their clock modes; the matrix column counts the cells.\n\n", legend())
	for _, p := range paths {
		fmt.Fprintf(w, "- %s: %s\n", p, pathTitles[p])
	}
	cells := cov.cells(rulecov.PathMatrix)
	fmt.Fprintf(w, "- matrix cells (%d): %s\n\n", len(cells), strings.Join(cells, ", "))
	fmt.Fprintf(w, "| rule | %s | %s |\n", strings.Join(stores, " | "), strings.Join(paths, " | "))
	fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---|", len(stores)+len(paths)))
	for _, r := range conformance.Rules() {
		runs := byRule[r.ID]
		row := []string{r.ID}
		for _, s := range stores {
			row = append(row, orDash(clocks(filter(runs, func(x ruleRun) bool { return x.path == "in-process" && x.store == s }))))
		}
		for _, p := range paths {
			row = append(row, orDash(pathCell(filter(runs, func(x ruleRun) bool { return x.path == p }), p)))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	writeGaps(w, cov)
	var others []string
	seen := map[string]bool{}
	for _, r := range cov.runs {
		if !r.isStore() && r.path == "in-process" && !seen[r.store] {
			seen[r.store] = true
			others = append(others, r.store)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		fmt.Fprintf(w, "\nIn-process targets that are not reference stores (the suite's mutants and variants), not counted above: %s.\n", strings.Join(others, ", "))
	}
}

func legend() string {
	var parts []string
	for _, s := range stores {
		parts = append(parts, code(s)+" "+s)
	}
	return strings.Join(parts, ", ") + ", others by name"
}

// pathCell is a path column's text: "m c r, y c", or for the matrix
// "10 cells c r".
func pathCell(runs []ruleRun, path string) string {
	if len(runs) == 0 {
		return ""
	}
	if path == rulecov.PathMatrix {
		cells := map[string]bool{}
		for _, r := range runs {
			cells[r.cell] = true
		}
		return fmt.Sprintf("%d cells %s", len(cells), clocks(runs))
	}
	byStore := map[string][]ruleRun{}
	for _, r := range runs {
		byStore[r.store] = append(byStore[r.store], r)
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(byStore)) {
		parts = append(parts, code(s)+" "+clocks(byStore[s]))
	}
	return strings.Join(parts, ", ")
}

// writeGaps lists, for every rule, the stores and clock modes it was not
// proven in by any path, and the paths that proved it in no clock mode:
// what the table's yardstick asks of a run.
func writeGaps(w io.Writer, cov coverage) {
	byRule := cov.byRule()
	var storeGaps, pathGaps []string
	for _, r := range conformance.Rules() {
		runs := byRule[r.ID]
		for _, s := range stores {
			for _, clock := range []string{rulecov.Controlled, rulecov.Real} {
				if len(filter(runs, func(x ruleRun) bool { return x.store == s && x.clock == clock })) == 0 {
					storeGaps = append(storeGaps, fmt.Sprintf("%s %s/%s", r.ID, s, clock[:1]))
				}
			}
		}
		for _, p := range paths {
			if len(filter(runs, func(x ruleRun) bool { return x.path == p })) == 0 {
				pathGaps = append(pathGaps, r.ID+" "+p)
			}
		}
	}
	fmt.Fprintf(w, "\nNot proven against a store in a clock mode by any path (%d; a rule that needs the controlled clock, or a capability the store lacks, skips in the other): %s\n",
		len(storeGaps), orNone(storeGaps))
	fmt.Fprintf(w, "\nNot proven through a path with any store (%d): %s\n", len(pathGaps), orNone(pathGaps))
}

func writeCosts(w io.Writer, c costs, top int) {
	fmt.Fprintf(w, "\n## Cost by package\n\n")
	cpuNote := "CPU is the package's test binary with every process it started and waited for (internal/cmd/testcpu); the shared database servers' is not in it."
	if !c.withCPU {
		cpuNote = "No CPU samples were given (-cpu): wall time only."
	}
	fmt.Fprintf(w, "%s\n\n| package | wall s | CPU s |\n|---|---|---|\n", cpuNote)
	var wall, cpu float64
	for _, p := range c.packages {
		wall += p.wall
		cpu += max(p.cpu, 0)
		fmt.Fprintf(w, "| %s%s | %.0f | %s |\n", p.name, failedMark(p.failed), p.wall, seconds(p.cpu))
	}
	fmt.Fprintf(w, "| **%d packages** | %.0f (summed) | %s |\n", len(c.packages), wall, seconds(cpu))
	fmt.Fprintf(w, "\n## Cost by test\n\nThe %d costliest top-level tests of %d", min(top, len(c.tests)), len(c.tests))
	if c.withCPU {
		fmt.Fprintf(w, " (a test's CPU is its package's, shared among the top-level tests running between two of its samples, by the time each ran; %.0f CPU s fell outside any test)", c.outside)
	}
	fmt.Fprintf(w, ".\n\n| test | wall s | CPU s |\n|---|---|---|\n")
	var restWall, restCPU float64
	for i, t := range c.tests {
		if i >= top {
			restWall += t.wall
			restCPU += max(t.cpu, 0)
			continue
		}
		fmt.Fprintf(w, "| %s%s | %.1f | %s |\n", t.name, failedMark(t.failed), t.wall, seconds(t.cpu))
	}
	if len(c.tests) > top {
		fmt.Fprintf(w, "| the other %d | %.0f | %s |\n", len(c.tests)-top, restWall, seconds(restCPU))
	}
}

func seconds(s float64) string {
	if s < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", s)
}

func failedMark(failed bool) string {
	if failed {
		return " (FAILED)"
	}
	return ""
}

func filter(runs []ruleRun, keep func(ruleRun) bool) []ruleRun {
	var out []ruleRun
	for _, r := range runs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none."
	}
	return strings.Join(list, ", ") + "."
}
