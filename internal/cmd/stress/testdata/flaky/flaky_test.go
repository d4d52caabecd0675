// Package flaky holds the tests stress's own test runs: one that always
// passes, and one that fails every other run.
package flaky

import (
	"os"
	"testing"
)

func TestPasses(t *testing.T) {}

// TestFailsEveryOtherRun fails on its first, third, … run, counted in the
// file $STRESS_TEST_COUNTER.
func TestFailsEveryOtherRun(t *testing.T) {
	path := os.Getenv("STRESS_TEST_COUNTER")
	b, _ := os.ReadFile(path)
	os.WriteFile(path, append(b, 'x'), 0o644)
	if len(b)%2 == 0 {
		t.Fatal("this run fails")
	}
}
