package conformance_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/docs"
)

// TestSpecDocMatchesSuite keeps docs/spec.md and the suite in step: every
// rule the document defines has a check, and every check is defined there, once.
func TestSpecDocMatchesSuite(t *testing.T) {
	lines, dups := docs.RuleLines()
	for _, id := range dups {
		t.Errorf("docs/spec.md defines %s twice", id)
	}
	var checked []string
	for _, r := range conformance.Rules() {
		if slices.Contains(checked, r.ID) {
			t.Errorf("the suite registers %s twice", r.ID)
		}
		checked = append(checked, r.ID)
		if r.Statement == "" {
			t.Errorf("%s has no statement", r.ID)
		}
		if !slices.ContainsFunc(conformance.Areas(), func(a conformance.Area) bool { return a.ID == r.Area }) {
			t.Errorf("%s is in unknown area %s", r.ID, r.Area)
		}
		if lines[r.ID] == 0 {
			t.Errorf("the suite checks %s but docs/spec.md does not define it", r.ID)
		} else if r.Line != lines[r.ID] {
			t.Errorf("%s says it is on line %d, docs/spec.md has it on %d", r.ID, r.Line, lines[r.ID])
		}
	}
	for id := range lines {
		if !slices.Contains(checked, id) {
			t.Errorf("docs/spec.md defines %s but the suite has no check for it", id)
		}
	}
	if len(lines) == 0 {
		t.Fatal("no rule definitions found in docs/spec.md")
	}
	t.Logf("%d rules, defined and checked", len(lines))
}

func TestSelect(t *testing.T) {
	all := conformance.Rules()
	got, err := conformance.Select([]string{"lease", "CAS-002"}, []string{"LEASE-016"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if (r.Area != "LEASE" && r.ID != "CAS-002") || r.ID == "LEASE-016" {
			t.Errorf("selected %s", r.ID)
		}
	}
	// The lease rules but LEASE-016, plus CAS-002.
	if want := countArea(all, "LEASE"); len(got) != want {
		t.Errorf("selected %d rules, want %d: the lease rules but LEASE-016, and CAS-002", len(got), want)
	}
	if everything, _ := conformance.Select(nil, nil); len(everything) != len(all) {
		t.Errorf("empty selection: %d rules, want all %d", len(everything), len(all))
	}
	if _, err := conformance.Select([]string{"NOPE-001"}, nil); err == nil {
		t.Error("an unknown rule was accepted")
	}
}

func countArea(rules []conformance.Rule, area string) int {
	n := 0
	for _, r := range rules {
		if r.Area == area {
			n++
		}
	}
	return n
}

// TestEveryMustHasARule fails for a normative sentence of docs/spec.md that
// no rule carries: every MUST stands in a rule's definition, or cites the
// rule that checks it.
func TestEveryMustHasARule(t *testing.T) {
	definition := regexp.MustCompile(`^- <a id="[a-z]+-\d{3}"></a>\*\*[A-Z]+-\d{3}\*\* `)
	citation := regexp.MustCompile(`\b[A-Z]+-\d{3}\b`)
	// Lower case too: the doc keeps "must" for requirements, so a
	// requirement cannot hide from this test in lower case.
	must := regexp.MustCompile(`(?i)\bmust\b`)
	for _, b := range docBlocks(docs.Spec) {
		if !must.MatchString(b.text) || definition.MatchString(b.text) || strings.Contains(b.text, "RFC 2119") {
			continue
		}
		if !citation.MatchString(b.text) {
			t.Errorf("docs/spec.md:%d: a MUST that no rule defines or cites: %q", b.line, b.text)
		}
	}
}

type docBlock struct {
	line int
	text string
}

// docBlocks splits Markdown into paragraphs, list items and table rows.
func docBlocks(md string) []docBlock {
	var out []docBlock
	var cur []string
	start := 0
	flush := func() {
		if len(cur) > 0 {
			out = append(out, docBlock{start, strings.Join(cur, " ")})
		}
		cur = nil
	}
	for i, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "", strings.HasPrefix(l, "#"):
			flush()
		case strings.HasPrefix(l, "- "), strings.HasPrefix(l, "|"):
			flush()
			start, cur = i+1, []string{trimmed}
			if strings.HasPrefix(l, "|") {
				flush()
			}
		default:
			if len(cur) == 0 {
				start = i + 1
			}
			cur = append(cur, trimmed)
		}
	}
	flush()
	return out
}

// TestEveryRuleIsCitedByTheCodeThatHonoursIt: a rule ID leads in one grep
// from docs/spec.md to its check (the register call) and to the code that
// honours it, which cites the ID in a comment; a citation of a rule that
// does not exist fails too.
func TestEveryRuleIsCitedByTheCodeThatHonoursIt(t *testing.T) {
	known := map[string]bool{}
	for _, r := range conformance.Rules() {
		known[r.ID] = true
	}
	id := regexp.MustCompile(`\b[A-Z]+-\d{3}\b`)
	cited := map[string]bool{}
	// The contract's own files, at the module's root, then the packages below it.
	for _, root := range []string{"..", "../driver", "../adapters", "../plugin", "../internal"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && root == ".." && path != ".." {
				return fs.SkipDir
			}
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range id.FindAllString(string(src), -1) {
				if !known[m] && areaKnown(m) {
					t.Errorf("%s cites %s, which docs/spec.md does not define", path, m)
				}
				cited[m] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range conformance.Rules() {
		if !cited[r.ID] {
			t.Errorf("%s: no code outside conformance/ cites it where the rule is honoured", r.ID)
		}
	}
}

// areaKnown reports whether id belongs to one of the suite's areas (so
// that other upper-case codes, like UTF-008, are not taken for rules).
func areaKnown(id string) bool {
	area, _, _ := strings.Cut(id, "-")
	return slices.ContainsFunc(conformance.Areas(), func(a conformance.Area) bool { return a.ID == area })
}
