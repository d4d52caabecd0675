package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// Every line of every command comes out whole, each command's in its
// order, a last line without its newline given one; the status is the
// first failing command's.
func TestLinesOfCommandsSideBySideStayWhole(t *testing.T) {
	var out, errOut bytes.Buffer
	long := strings.Repeat("x", 100_000)
	code := run([]string{
		"for i in 1 2 3; do echo a$i; done; printf " + long,
		"for i in 1 2 3; do echo b$i; done; exit 3",
		"echo c1; echo oops >&2",
	}, &out, &errOut)
	if code != 3 {
		t.Errorf("exit %d, want 3 (the failing command's)", code)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var a, b []string
	for _, l := range lines {
		switch l[0] {
		case 'a':
			a = append(a, l)
		case 'b':
			b = append(b, l)
		}
	}
	if !slices.Equal(a, []string{"a1", "a2", "a3"}) || !slices.Equal(b, []string{"b1", "b2", "b3"}) ||
		!slices.Contains(lines, "c1") || !slices.Contains(lines, long) || len(lines) != 8 {
		t.Errorf("merged output has %d lines, not every command's whole and in order: %.200q", len(lines), out.String())
	}
	if errOut.String() != "oops\n" {
		t.Errorf("stderr %q, want the command's own; out %.300q", errOut.String(), out.String())
	}
	if code := run([]string{"true", "true"}, &out, &errOut); code != 0 {
		t.Errorf("exit %d with every command passing", code)
	}
}
