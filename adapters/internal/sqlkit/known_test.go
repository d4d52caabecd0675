package sqlkit

import (
	"strings"
	"testing"
	"time"
)

// A kept row is taken once, within knownRowAge, with its database time
// moved on by the time elapsed here (discounted), never back.
func TestKnownRowsAreTakenOnceAndYoung(t *testing.T) {
	var k knownRows
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	db := t0.Add(-time.Hour)
	k.put([]row{{RunID: "a", Version: 3}, {RunID: "b"}}, db, t0)
	r, ok := k.take("a", t0.Add(100*time.Millisecond))
	if !ok || r.Version != 3 {
		t.Fatalf("took %+v, %v; want the row kept", r, ok)
	}
	if want := db.Add(100*time.Millisecond - 100*time.Microsecond); !r.Now.Equal(want) {
		t.Fatalf("estimated %v; want %v (elapsed less a thousandth)", r.Now, want)
	}
	if _, ok := k.take("a", t0.Add(200*time.Millisecond)); ok {
		t.Fatal("a row was taken twice")
	}
	if _, ok := k.take("b", t0.Add(knownRowAge)); ok {
		t.Fatal("a row as old as knownRowAge was taken")
	}
	if _, ok := k.take("c", t0); ok {
		t.Fatal("a row never kept was taken")
	}
	var none *knownRows
	none.put([]row{{RunID: "a"}}, db, t0)
	if _, ok := none.take("a", t0); ok {
		t.Fatal("a nil knownRows kept a row")
	}
}

// The rows kept stay within their count and bytes, whatever is written;
// an old row is swept; a snapshot too large is not kept.
func TestKnownRowsStayBounded(t *testing.T) {
	var k knownRows
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 3 * knownRowsMax {
		k.put([]row{{RunID: strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String()}}, t0, t0)
	}
	if n := k.len(); n > knownRowsMax || n == 0 {
		t.Fatalf("kept %d rows; want 1 to %d", n, knownRowsMax)
	}
	big := strings.Repeat("s", knownSnapshotMax)
	for i := range 2 * knownBytesMax / knownSnapshotMax {
		k.put([]row{{RunID: time.Duration(i).String() + "big", Snapshot: big}}, t0, t0)
	}
	if k.bytes > knownBytesMax {
		t.Fatalf("kept %d bytes; want at most %d", k.bytes, knownBytesMax)
	}
	k.put([]row{{RunID: "huge", Snapshot: big + "s"}}, t0, t0)
	if _, ok := k.take("huge", t0); ok {
		t.Fatal("a snapshot larger than knownSnapshotMax was kept")
	}
	later := t0.Add(knownRowAge)
	k.put([]row{{RunID: "new"}}, t0, later)
	if n := k.len(); n != 1 {
		t.Fatalf("after knownRowAge, %d rows kept; want the old ones swept, 1 left", n)
	}
	k.forgetAll()
	if k.len() != 0 || k.bytes != 0 {
		t.Fatalf("forgetAll left %d rows, %d bytes", k.len(), k.bytes)
	}
}

// The estimate of the database's time never goes back, follows the
// reading that puts the database latest, and is given only while its
// reading is young.
func TestServerClockEstimates(t *testing.T) {
	var c serverClock
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, ok := c.estimate(t0); ok {
		t.Fatal("an estimate without a reading")
	}
	c.observe(t0, t0)
	first, ok := c.estimate(t0.Add(10 * time.Millisecond))
	if !ok || !first.Equal(t0.Add(10*time.Millisecond-10*time.Microsecond)) {
		t.Fatalf("estimated %v, %v", first, ok)
	}
	// A slow statement's reading, which puts the database earlier, does
	// not pull the estimate back, even once the first reading is old.
	c.observe(t0.Add(-50*time.Millisecond), t0.Add(600*time.Millisecond))
	if got, _ := c.estimate(t0.Add(600 * time.Millisecond)); got.Before(first) {
		t.Fatalf("estimated %v after %v: it went back", got, first)
	}
	c.given(t0.Add(time.Hour))
	if got, _ := c.estimate(t0.Add(700 * time.Millisecond)); !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("estimated %v after Now answered an hour on", got)
	}
	if _, ok := c.estimate(t0.Add(600*time.Millisecond + knownRowAge)); ok {
		t.Fatal("an estimate from a reading as old as knownRowAge")
	}
}

// A claim holds only runs no other claim of the handle holds, nor wrote
// since the claim's read began (that read may still see them queued), and
// reads enough candidates to find its own beside the others'.
func TestClaimHoldsPassOverOtherClaims(t *testing.T) {
	var h claimHolds
	cands := func(ids ...string) []candidate {
		out := make([]candidate, len(ids))
		for i, id := range ids {
			out[i].row.RunID = id
		}
		return out
	}
	a, limit := h.begin(1)
	if limit != 1 {
		t.Fatalf("a lone claim of 1 reads %d candidates; want 1", limit)
	}
	b, limit := h.begin(1)
	if limit != 2 {
		t.Fatalf("a claim of 1 beside another reads %d candidates; want 2", limit)
	}
	heldA := h.hold(cands("x", "y"), 1, a)
	heldB := h.hold(cands("x", "y"), 1, b)
	if len(heldA) != 1 || heldA[0].row.RunID != "x" || len(heldB) != 1 || heldB[0].row.RunID != "y" {
		t.Fatalf("held %v and %v; want x and y", heldA, heldB)
	}
	c, _ := h.begin(1) // reads while x is being written
	h.done(heldA, a)
	if got := h.hold(cands("x", "z"), 1, c); len(got) != 1 || got[0].row.RunID != "z" {
		t.Fatalf("held %v; want z: x was written after the read began", got)
	}
	h.done(heldB, b)
	d, _ := h.begin(1) // reads after x was written
	if got := h.hold(cands("x"), 1, d); len(got) != 1 {
		t.Fatalf("held %v; want x, whose write ended before the read began", got)
	}
}
