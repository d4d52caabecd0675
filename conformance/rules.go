package conformance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/runstate/runstate/docs"
)

// Rule is one normative statement of docs/spec.md and the check that proves it.
type Rule struct {
	// ID is stable across releases: AREA-NNN.
	ID string `json:"id"`
	// Area groups rules: FSM, CAS, DIAG, AUD, RUN, LIST, LEASE, REC, BAD, CTX, LIN, FAULT, BATCH, WATCH, WAKE, CAP.
	Area string `json:"area"`
	// Statement is the rule in one line.
	Statement string `json:"statement"`
	// Requires lists the capabilities the check needs.
	Requires Capabilities `json:"requires"`
	// Line is where docs/spec.md defines the rule (0 if it does not).
	Line int `json:"spec_line"`
	// URL links to the rule's definition in the published docs/spec.md, by
	// an anchor that does not move when the document changes.
	URL   string `json:"url"`
	check func(*checkState)
}

// Area is a group of rules, such as FSM or LEASE.
type Area struct{ ID, Title string }

// areas in the order reports list them, with a title each.
var areas = []Area{
	{"FSM", "Status machine"},
	{"CAS", "Versions and compare-and-set"},
	{"DIAG", "Failure diagnostics"},
	{"AUD", "Audit trail"},
	{"RUN", "Create and get"},
	{"LIST", "Listing and pagination"},
	{"LEASE", "Leases and fencing"},
	{"REC", "Crash recovery"},
	{"BAD", "Bad input"},
	{"CTX", "Context"},
	{"LIN", "Linearizability"},
	{"FAULT", "Faults at the backend"},
	{"BATCH", "Batches"},
	{"WATCH", "Watching"},
	{"WAKE", "Parked runs"},
	{"CAP", "Declared capabilities"},
}

// Areas returns the areas in the order reports list them, with a title each.
func Areas() []Area { return slices.Clone(areas) }

var registry []Rule

// register adds a rule; called from the area files' init functions.
func register(id, statement string, requires Capabilities, check func(*checkState)) {
	area, _, _ := strings.Cut(id, "-")
	registry = append(registry, Rule{ID: id, Area: area, Statement: statement, Requires: requires, Line: specLines[id], URL: docs.RuleURL(id), check: check})
}

// specLines locates each rule in the embedded docs/spec.md.
var specLines, _ = docs.RuleLines()

var (
	none   = Capabilities{}
	leases = Capabilities{Leases: true}
)

// Rules returns every rule, ordered by area then ID.
func Rules() []Rule {
	out := slices.Clone(registry)
	areaIndex := func(a string) int {
		return slices.IndexFunc(areas, func(x Area) bool { return x.ID == a })
	}
	slices.SortFunc(out, func(a, b Rule) int {
		if d := areaIndex(a.Area) - areaIndex(b.Area); d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Select returns the rules matching any of the patterns in run (all when
// run is empty) and none of those in skip. A pattern is a rule ID
// (LEASE-005) or an area (LEASE). Unknown patterns are an error.
func Select(run, skip []string) ([]Rule, error) {
	all := Rules()
	matches := func(r Rule, pat string) bool { return strings.EqualFold(pat, r.ID) || strings.EqualFold(pat, r.Area) }
	for _, pat := range append(slices.Clone(run), skip...) {
		if !slices.ContainsFunc(all, func(r Rule) bool { return matches(r, pat) }) {
			return nil, fmt.Errorf("no rule or area %q", pat)
		}
	}
	var out []Rule
	for _, r := range all {
		in := len(run) == 0 || slices.ContainsFunc(run, func(p string) bool { return matches(r, p) })
		if in && !slices.ContainsFunc(skip, func(p string) bool { return matches(r, p) }) {
			out = append(out, r)
		}
	}
	return out, nil
}
