package compat

import (
	"encoding/json"
	"fmt"
	"strings"
)

// report is what a conformance-runner of any release prints with
// --format json: certify's certificate (modes), or a plain run's report
// (results).
type report struct {
	Modes []struct {
		Mode    string       `json:"mode"`
		Results []ruleResult `json:"results"`
	} `json:"modes"`
	Results []ruleResult `json:"results"`
}

type ruleResult struct {
	Rule struct {
		ID string `json:"id"`
	} `json:"rule"`
	Outcome  string `json:"outcome"`
	Detail   string `json:"detail"`
	Lacks    string `json:"lacks"` // from runners that name the interface a store lacks
	Failures []struct {
		Expected string `json:"expected"`
		Seen     string `json:"seen"`
	} `json:"failures"`
}

// A verdict is what one rule did over every mode a runner ran it in, as
// certify judges a profile: failed when it failed or broke in any mode,
// passed when it passed in one, skipped when it skipped in all.
type verdict struct {
	outcome string // pass, fail or skip
	// why holds each failure's text (what was expected and seen, or the
	// harness's error) or each skip's reason.
	why []string
}

const (
	passed  = "pass"
	failed  = "fail"
	skipped = "skip"
)

// verdicts reads a runner's JSON output into each rule's verdict.
func verdicts(out []byte) (map[string]verdict, error) {
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("not the runner's JSON: %v", err)
	}
	modes := [][]ruleResult{rep.Results}
	if len(rep.Modes) > 0 {
		modes = nil
		for _, m := range rep.Modes {
			modes = append(modes, m.Results)
		}
	}
	got := map[string]verdict{}
	for _, results := range modes {
		for _, r := range results {
			v, seen := got[r.Rule.ID]
			switch r.Outcome {
			case "fail", "error":
				if v.outcome != failed {
					v = verdict{outcome: failed}
				}
				v.why = append(v.why, r.failure())
			case "pass":
				if v.outcome != failed {
					v = verdict{outcome: passed}
				}
			case "skip":
				if !seen {
					v.outcome = skipped
				}
				if v.outcome == skipped {
					v.why = append(v.why, strings.TrimSpace(r.Lacks+" "+r.Detail))
				}
			default:
				return nil, fmt.Errorf("%s: outcome %q", r.Rule.ID, r.Outcome)
			}
			got[r.Rule.ID] = v
		}
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("the runner reported no rule")
	}
	return got, nil
}

// failure is a failed result's text: its failures, or the harness's error.
func (r ruleResult) failure() string {
	var b strings.Builder
	b.WriteString(r.Detail)
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "\nexpected %s; seen %s", f.Expected, f.Seen)
	}
	return strings.TrimSpace(b.String())
}

// counts are a cell's rules passed, failed and skipped.
type counts struct{ passed, failed, skipped int }

func (c counts) String() string { return fmt.Sprintf("%d/%d/%d", c.passed, c.failed, c.skipped) }

func countVerdicts(got map[string]verdict) counts {
	var c counts
	for _, v := range got {
		switch v.outcome {
		case passed:
			c.passed++
		case failed:
			c.failed++
		case skipped:
			c.skipped++
		}
	}
	return c
}
