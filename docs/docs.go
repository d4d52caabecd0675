// Package docs embeds the documents that programs cite, so that a report
// can point at the line of docs/spec.md that defines a rule.
package docs

import (
	_ "embed"
	"regexp"
	"strings"
)

// Spec is docs/spec.md.
//
//go:embed spec.md
var Spec string

// ruleDefinition matches the bullet that defines a rule: its anchor (the
// ID in lower case, stable however the document changes), then the ID.
var ruleDefinition = regexp.MustCompile(`^- <a id="([a-z]+-\d{3})"></a>\*\*([A-Z]+-\d{3})\*\* `)

// SpecURL is where docs/spec.md is published; RuleURL links into it.
const SpecURL = "https://github.com/runstate/runstate/blob/main/docs/spec.md"

// RuleURL is the stable link to a rule's definition, valid outside this
// repository: the published document at the rule's anchor.
func RuleURL(id string) string { return SpecURL + "#" + strings.ToLower(id) }

// RuleLines maps each rule ID defined in docs/spec.md to its 1-based line.
// A rule defined twice maps to its first line; duplicates lists the
// others, and rules whose anchor is not their own ID.
func RuleLines() (lines map[string]int, duplicates []string) {
	lines = map[string]int{}
	for i, l := range strings.Split(Spec, "\n") {
		if m := ruleDefinition.FindStringSubmatch(l); m != nil {
			id := m[2]
			if _, seen := lines[id]; seen || m[1] != strings.ToLower(id) {
				duplicates = append(duplicates, id) // or an anchor that names another rule
				continue
			}
			lines[id] = i + 1
		}
	}
	return lines, duplicates
}
