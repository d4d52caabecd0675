package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate/conformance"
)

// report is the verdict of one run, in every format.
type report struct {
	Suite        string                      `json:"suite_version"`
	Adapter      string                      `json:"adapter"`
	StoreVersion string                      `json:"adapter_version"`
	Capabilities conformance.Capabilities    `json:"capabilities"`
	Config       map[string]string           `json:"config,omitempty"`
	Environment  map[string]string           `json:"environment"`
	Started      time.Time                   `json:"started"`
	Duration     time.Duration               `json:"-"` // duration_seconds in JSON
	Counts       map[conformance.Outcome]int `json:"counts"`
	Results      []conformance.Result        `json:"results"`
}

// MarshalJSON writes the duration in seconds, as every duration runstate
// prints.
func (r report) MarshalJSON() ([]byte, error) {
	type fields report
	return json.Marshal(struct {
		fields
		DurationSeconds float64 `json:"duration_seconds"`
	}{fields(r), r.Duration.Seconds()})
}

func environment() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH, "host": host}
}

// summary is the closing line of every human report.
func (r report) summary() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped, %d errors", r.Counts[conformance.Pass], r.Counts[conformance.Fail],
		r.Counts[conformance.Skip], r.Counts[conformance.Error])
}

// byArea groups results in area order.
func (r report) byArea(fn func(area string, title string, results []conformance.Result)) {
	for _, a := range conformance.Areas() {
		var rs []conformance.Result
		for _, res := range r.Results {
			if res.Rule.Area == a.ID {
				rs = append(rs, res)
			}
		}
		if len(rs) > 0 {
			fn(a.ID, a.Title, rs)
		}
	}
}

// tally counts results by outcome.
func tally(rs []conformance.Result) map[conformance.Outcome]int {
	// Every outcome is counted, zero included, so that readers need no default.
	out := map[conformance.Outcome]int{conformance.Pass: 0, conformance.Fail: 0, conformance.Skip: 0, conformance.Error: 0}
	for _, r := range rs {
		out[r.Outcome]++
	}
	return out
}

// problem reports whether a result needs a person's attention.
func problem(r conformance.Result) bool {
	return r.Outcome == conformance.Fail || r.Outcome == conformance.Error
}

func writeJSON(w io.Writer, r report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func writeText(w io.Writer, r report) {
	fmt.Fprintf(w, "runstate conformance %s: %s (%s)\ncapabilities: %s\n\n", r.Suite, r.Adapter, r.StoreVersion, r.Capabilities)
	r.byArea(func(area, title string, rs []conformance.Result) {
		c := tally(rs)
		fmt.Fprintf(w, "%-6s %-30s %3d pass %3d fail %3d skip %3d error\n", area, title,
			c[conformance.Pass], c[conformance.Fail], c[conformance.Skip], c[conformance.Error])
		for _, res := range rs {
			if !problem(res) {
				continue
			}
			fmt.Fprintf(w, "  %s %s — %s\n    rule: %s\n", strings.ToUpper(string(res.Outcome)), res.Rule.ID, res.Rule.Statement, res.Rule.URL)
			if res.Detail != "" {
				fmt.Fprintf(w, "    %s\n", res.Detail)
			}
			for _, f := range res.Failures {
				fmt.Fprintf(w, "    expected %s\n    saw      %s\n", f.Expected, f.Seen)
			}
			for _, a := range res.Attachments {
				fmt.Fprintf(w, "    see %s\n", attachmentPlace(a))
			}
		}
		for _, res := range rs {
			if res.Outcome == conformance.Skip {
				fmt.Fprintf(w, "  SKIP %s — %s\n", res.Rule.ID, res.Detail)
			}
		}
	})
	fmt.Fprintf(w, "\n%s in %v\n", r.summary(), r.Duration.Round(time.Millisecond))
}

// writeMarkdown writes the Markdown report; markdownDir is where it goes,
// for links to attachments.
func writeMarkdown(w io.Writer, r report, markdownDir string) {
	fmt.Fprintf(w, "# runstate conformance report\n\n| | |\n| --- | --- |\n")
	fmt.Fprintf(w, "| suite | %s |\n| adapter | %s |\n| adapter version | %s |\n", r.Suite, r.Adapter, r.StoreVersion)
	fmt.Fprintf(w, "| capabilities | %s |\n", r.Capabilities)
	for _, k := range sortedKeys(r.Config) {
		fmt.Fprintf(w, "| config %s | `%s` |\n", k, r.Config[k])
	}
	for _, k := range sortedKeys(r.Environment) {
		fmt.Fprintf(w, "| %s | %s |\n", k, r.Environment[k])
	}
	fmt.Fprintf(w, "| started | %s |\n| duration | %v |\n\n**%s**\n\n", r.Started.Format(time.RFC3339), r.Duration.Round(time.Millisecond), r.summary())
	fmt.Fprintf(w, "| area | pass | fail | skip | error |\n| --- | --- | --- | --- | --- |\n")
	r.byArea(func(area, title string, rs []conformance.Result) {
		c := tally(rs)
		fmt.Fprintf(w, "| %s %s | %d | %d | %d | %d |\n", area, title, c[conformance.Pass], c[conformance.Fail], c[conformance.Skip], c[conformance.Error])
	})
	fmt.Fprintf(w, "\n## Results\n\n| rule | outcome | statement | why skipped |\n| --- | --- | --- | --- |\n")
	for _, res := range r.Results {
		why := ""
		if res.Outcome == conformance.Skip {
			why = res.Detail
		}
		fmt.Fprintf(w, "| [%s](%s) | %s | %s | %s |\n", res.Rule.ID, res.Rule.URL, res.Outcome, res.Rule.Statement, why)
	}
	for _, res := range r.Results {
		if !problem(res) {
			continue
		}
		fmt.Fprintf(w, "\n### %s %s\n\n%s ([%s](%s))\n\n", strings.ToUpper(string(res.Outcome)), res.Rule.ID, res.Rule.Statement, res.Rule.ID, res.Rule.URL)
		if res.Detail != "" {
			fmt.Fprintf(w, "```\n%s\n```\n", res.Detail)
		}
		for _, f := range res.Failures {
			fmt.Fprintf(w, "- expected %s\n  - saw `%s`\n", f.Expected, strings.ReplaceAll(f.Seen, "`", "'"))
		}
		for _, a := range res.Attachments {
			if a.Path != "" {
				fmt.Fprintf(w, "- see [%s](%s)\n", filepath.Base(a.Path), linkFrom(markdownDir, a.Path))
			} else {
				fmt.Fprintf(w, "- %s\n", attachmentPlace(a))
			}
		}
	}
}

// linkFrom is a relative link from dir to path, or path when there is none.
func linkFrom(dir, path string) string {
	if rel, err := filepath.Rel(dir, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return path
}

// attachmentPlace says where an attachment was written, or how to get it.
func attachmentPlace(a conformance.Attachment) string {
	if a.Path != "" {
		return a.Path
	}
	return a.Name + " (not written: pass --attachments DIR, or --markdown or --junit)"
}

// JUnit XML, as CI systems read it: one testsuite per area.
type junitSuites struct {
	XMLName    xml.Name        `xml:"testsuites"`
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       float64         `xml:"time,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Suites     []junitSuite    `xml:"testsuite"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

func writeJUnit(w io.Writer, r report) error {
	out := junitSuites{Name: "runstate conformance " + r.Suite + ": " + r.Adapter, Tests: len(r.Results),
		Failures: r.Counts[conformance.Fail], Errors: r.Counts[conformance.Error], Skipped: r.Counts[conformance.Skip],
		Time: r.Duration.Seconds()}
	out.Properties = []junitProperty{{"suite_version", r.Suite}, {"adapter", r.Adapter}, {"adapter_version", r.StoreVersion},
		{"capabilities", r.Capabilities.String()}}
	for _, k := range sortedKeys(r.Config) {
		out.Properties = append(out.Properties, junitProperty{"config." + k, r.Config[k]})
	}
	for _, k := range sortedKeys(r.Environment) {
		out.Properties = append(out.Properties, junitProperty{"env." + k, r.Environment[k]})
	}
	r.byArea(func(area, title string, rs []conformance.Result) {
		c := tally(rs)
		s := junitSuite{Name: area + " " + title, Tests: len(rs), Failures: c[conformance.Fail], Errors: c[conformance.Error], Skipped: c[conformance.Skip]}
		for _, res := range rs {
			c := junitCase{Name: res.Rule.ID + " " + res.Rule.Statement, Classname: "runstate." + area, Time: res.Duration.Seconds()}
			var body strings.Builder
			fmt.Fprintf(&body, "%s\n", res.Rule.URL)
			for _, f := range res.Failures {
				fmt.Fprintf(&body, "expected %s\nsaw %s\n", f.Expected, f.Seen)
			}
			switch res.Outcome {
			case conformance.Fail:
				c.Failure = &junitMessage{Message: res.Failures[0].Expected, Body: body.String()}
			case conformance.Error:
				c.Error = &junitMessage{Message: res.Detail, Body: body.String()}
			case conformance.Skip:
				c.Skipped = &junitMessage{Message: res.Detail}
			}
			s.Cases = append(s.Cases, c)
		}
		out.Suites = append(out.Suites, s)
	})
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(out)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
