package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// sample is one line of testcpu's file.
type sample struct {
	Package string  `json:"package"`
	PID     int     `json:"pid"`
	TimeMS  int64   `json:"t_ms"`
	CPU     float64 `json:"cpu_s"`
	Final   bool    `json:"final"`
}

func (s sample) time() time.Time { return time.UnixMilli(s.TimeMS) }

func readSamples(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sample
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		var x sample
		if err := json.Unmarshal(s.Bytes(), &x); err != nil {
			return nil, fmt.Errorf("%s:%d: not testcpu's output: %v", path, line, err)
		}
		out = append(out, x)
	}
	return out, s.Err()
}

// cost is what a package or a test spent: wall time, and CPU seconds
// when samples were given (-1 without).
type cost struct {
	name      string
	wall, cpu float64
	failed    bool
}

type costs struct {
	packages []cost
	tests    []cost // top-level tests, "package.Test"
	withCPU  bool
	// outside is the CPU of each package spent while none of its tests
	// ran: start-up, TestMain, and a binary's exit.
	outside float64
}

// span is a stretch of time a top-level test ran, not paused.
type span struct {
	test       string
	start, end time.Time
}

// costsOf reads each package's wall time from go test's closing event,
// and its CPU from the final sample. A test's CPU is its package's
// sampled CPU shared out over the intervals between samples among the
// top-level tests running then, in proportion to the time each ran: an
// estimate where tests run in parallel or an interval holds two tests,
// exact where they run alone.
func costsOf(events []event, samples []sample) costs {
	var c costs
	c.withCPU = len(samples) > 0
	bySample := map[string][]sample{}
	for _, s := range samples {
		bySample[s.Package] = append(bySample[s.Package], s)
	}
	began := map[string]time.Time{}              // "package.Test" → its first run event
	running := map[string]map[string]time.Time{} // package → test → since
	spans := map[string][]span{}
	wall := map[string]float64{}
	failed := map[string]bool{}
	for _, e := range events {
		top := e.Test != "" && !strings.Contains(e.Test, "/")
		switch {
		case (e.Action == "run" || e.Action == "cont") && top:
			if _, ok := began[e.Package+"."+e.Test]; !ok {
				began[e.Package+"."+e.Test] = e.Time
			}
			if running[e.Package] == nil {
				running[e.Package] = map[string]time.Time{}
			}
			running[e.Package][e.Test] = e.Time
		case (e.Action == "pause" || e.Action == "pass" || e.Action == "fail" || e.Action == "skip") && top:
			if since, ok := running[e.Package][e.Test]; ok {
				spans[e.Package] = append(spans[e.Package], span{e.Test, since, e.Time})
				delete(running[e.Package], e.Test)
			}
			if e.Action != "pause" {
				// From its start to its end, parallel subtests included:
				// go test's Elapsed leaves out those that ran after the
				// test's own function returned.
				wall[e.Package+"."+e.Test] = max(e.Elapsed, e.Time.Sub(began[e.Package+"."+e.Test]).Seconds())
				failed[e.Package+"."+e.Test] = e.Action == "fail"
			}
		case (e.Action == "pass" || e.Action == "fail") && e.Test == "":
			c.packages = append(c.packages, cost{name: e.Package, wall: e.Elapsed, cpu: -1, failed: e.Action == "fail"})
		}
	}
	// A package may run as two binaries at once (its race-detected tests
	// and its others): its CPU is theirs together, and the CPU of each is
	// shared among the package's tests running at the time.
	type binary struct {
		pkg string
		pid int
	}
	series := map[binary][]sample{}
	for _, s := range samples {
		series[binary{s.Package, s.PID}] = append(series[binary{s.Package, s.PID}], s)
	}
	pkgCPU := map[string]float64{}
	testCPU := map[string]float64{}
	for b, ss := range series {
		var final float64
		for _, s := range ss {
			final = max(final, s.CPU)
		}
		pkgCPU[b.pkg] += final
		// testcpu's first sample is the binary's start, at no CPU.
		prevT, prevCPU := ss[0].time(), 0.0
		for _, s := range ss {
			share(spans[b.pkg], prevT, s.time(), s.CPU-prevCPU, func(test string, cpu float64) { testCPU[b.pkg+"."+test] += cpu }, &c.outside)
			prevT, prevCPU = s.time(), max(prevCPU, s.CPU)
		}
	}
	merged := map[string]int{}
	var packages []cost
	for _, p := range c.packages {
		if i, ok := merged[p.name]; ok {
			packages[i].wall = max(packages[i].wall, p.wall)
			packages[i].failed = packages[i].failed || p.failed
			continue
		}
		merged[p.name] = len(packages)
		if cpu, ok := pkgCPU[p.name]; ok {
			p.cpu = cpu
		}
		packages = append(packages, p)
	}
	c.packages = packages
	for name, w := range wall {
		cpu := -1.0
		if c.withCPU {
			cpu = testCPU[name]
		}
		c.tests = append(c.tests, cost{name: name, wall: w, cpu: cpu, failed: failed[name]})
	}
	byCost := func(a, b cost) int {
		if d := b.cpu - a.cpu; d != 0 {
			return sign(d)
		}
		return sign(b.wall - a.wall)
	}
	slices.SortFunc(c.packages, byCost)
	slices.SortFunc(c.tests, byCost)
	return c
}

// share gives cpu, spent between from and to, to the spans running then:
// the share of the interval that no span covers goes to outside, the rest
// to the spans, each in proportion to its overlap.
func share(spans []span, from, to time.Time, cpu float64, give func(string, float64), outside *float64) {
	if cpu <= 0 || !to.After(from) {
		return
	}
	var total time.Duration
	var clipped []span
	overlap := make([]time.Duration, len(spans))
	for i, s := range spans {
		start, end := later(s.start, from), earlier(s.end, to)
		if end.After(start) {
			overlap[i] = end.Sub(start)
			total += overlap[i]
			clipped = append(clipped, span{start: start, end: end})
		}
	}
	if total == 0 {
		*outside += cpu
		return
	}
	covered := union(clipped)
	inTests := cpu * float64(covered) / float64(to.Sub(from))
	*outside += cpu - inTests
	for i, s := range spans {
		if overlap[i] > 0 {
			give(s.test, inTests*float64(overlap[i])/float64(total))
		}
	}
}

// union is the time the spans cover together.
func union(spans []span) time.Duration {
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	var sum time.Duration
	var end time.Time
	for _, s := range spans {
		if s.start.After(end) {
			sum += s.end.Sub(s.start)
			end = s.end
		} else if s.end.After(end) {
			sum += s.end.Sub(end)
			end = s.end
		}
	}
	return sum
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func sign(f float64) int {
	switch {
	case f > 0:
		return 1
	case f < 0:
		return -1
	}
	return 0
}
