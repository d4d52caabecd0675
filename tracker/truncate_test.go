package tracker_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/tracker"
)

func TestTruncateOutput(t *testing.T) {
	for _, s := range []string{strings.Repeat("a", 10_000), strings.Repeat("é", 5_000), strings.Repeat("日本", 2_000), "short"} {
		got := tracker.Truncate(s, runstate.MaxHostOutputBytes)
		if len(got) > runstate.MaxHostOutputBytes || !utf8.ValidString(got) {
			t.Errorf("Truncate gave %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
		}
		if len(s) <= runstate.MaxHostOutputBytes && got != s {
			t.Error("short output must be kept as it is")
		}
	}
}

func TestTruncateTextKeepsItsLimit(t *testing.T) {
	for _, limit := range []int{0, 3, 10, 15, 1024} {
		for _, s := range []string{strings.Repeat("é", 2000), strings.Repeat("x", 2000)} {
			got := tracker.Truncate(s, limit)
			if len(got) > limit || !utf8.ValidString(got) {
				t.Errorf("Truncate(%d): %d bytes, valid UTF-8 %v", limit, len(got), utf8.ValidString(got))
			}
		}
	}
	if got := tracker.Truncate("short", 1024); got != "short" {
		t.Errorf("a text within the limit changed: %q", got)
	}
}

func TestTruncateTextBoundaries(t *testing.T) {
	mark := "…[truncated]"
	if got := tracker.Truncate("abcdef", 6); got != "abcdef" {
		t.Errorf("a text exactly at the limit changed: %q", got)
	}
	if got := tracker.Truncate(strings.Repeat("x", 30), 20); got != strings.Repeat("x", 20-len(mark))+mark {
		t.Errorf("cut with a mark: %q", got)
	}
	// A limit that cannot hold the mark cuts without one.
	if got := tracker.Truncate(strings.Repeat("x", 40), len(mark)-1); got != strings.Repeat("x", len(mark)-1) {
		t.Errorf("a short limit: %q", got)
	}
	if got := tracker.Truncate(strings.Repeat("x", 40), len(mark)); got != mark {
		t.Errorf("a limit the size of the mark: %q", got)
	}
	// Text that is not UTF-8 is cut without reading before its start.
	if got := tracker.Truncate(strings.Repeat("\x80", 40), len(mark)+1); got != mark {
		t.Errorf("invalid UTF-8: %q", got)
	}
	// Never split a rune: "é" is two bytes.
	if got := tracker.Truncate("é"+strings.Repeat("x", 30), len(mark)+1); got != mark {
		t.Errorf("a cut inside a rune must step back: %q", got)
	}
}
