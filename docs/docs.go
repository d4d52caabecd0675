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

// ruleDefinition matches the bullet that defines a rule.
var ruleDefinition = regexp.MustCompile(`^- \*\*([A-Z]+-\d{3})\*\* `)

// RuleLines maps each rule ID defined in docs/spec.md to its 1-based line.
// A rule defined twice maps to its first line; Duplicates lists the others.
func RuleLines() (lines map[string]int, duplicates []string) {
	lines = map[string]int{}
	for i, l := range strings.Split(Spec, "\n") {
		if m := ruleDefinition.FindStringSubmatch(l); m != nil {
			if _, seen := lines[m[1]]; seen {
				duplicates = append(duplicates, m[1])
				continue
			}
			lines[m[1]] = i + 1
		}
	}
	return lines, duplicates
}
