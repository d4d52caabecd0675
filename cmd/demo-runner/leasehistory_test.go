package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
)

// A fleet's lease history, as its stores decided it: every store the
// fleet uses is built on the driver kit, which logs each lease it granted,
// renewed or released at debug level once the write committed
// (driver.WrapOptions.Logger), with the lease's times in the store's own
// clock; a claim's line also holds the lease it ended, as the claim's own
// write read it (ended_*). The processes that decide are the workers and
// operator commands themselves (SQL and etcd stores), the plugin processes
// under them (whose lines reach their host's log), or whichever process
// holds a Badger directory. Read together, their logs tell for every claim
// whether the lease it ended was still live when the store granted it.
//
// What a log cannot hold: a decision whose process was killed between the
// commit and the line, or before a plugin's line was relayed to its host;
// and a write whose caller stopped waiting before its answer (a renewal
// past its deadline, which the store may still commit: the kit logs what
// it answers). A release or renewal so lost is still in the next claim's
// read of the lease, so the verdict takes the lease as that claim read it,
// with the holder's own lines beside it: a read that missed a renewal the
// holder logged shows as a claim of a live lease. A takeover whose claim
// line is missing is reported as not judged.

// sourceLog is one process's log, named by who wrote it.
type sourceLog struct {
	source, text string
}

// runLines returns the lines of logs that name runID and were written
// between from and to (by the writer's clock, read from time=), each
// prefixed by its source, in time order; at most max of them.
func runLines(logs []sourceLog, runID string, from, to time.Time, max int) []string {
	type stamped struct {
		at   time.Time
		line string
	}
	var found []stamped
	for _, l := range logs {
		for _, line := range strings.Split(l.text, "\n") {
			if !strings.Contains(line, runID) {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, logAttrs(line)["time"])
			if err != nil || at.Before(from) || at.After(to) {
				continue
			}
			found = append(found, stamped{at, l.source + ": " + line})
		}
	}
	slices.SortStableFunc(found, func(a, b stamped) int { return a.at.Compare(b.at) })
	var out []string
	for i, s := range found {
		if i == max {
			out = append(out, fmt.Sprintf("(%d more)", len(found)-max))
			break
		}
		out = append(out, s.line)
	}
	return out
}

// leaseDecision is one line of the history.
type leaseDecision struct {
	what     string // claimed, renewed or released
	runID    string
	token    int64
	owner    string    // worker/incarnation; empty for a release
	acquired time.Time // store time; zero for a release
	expires  time.Time // store time; zero for a release
	// ended is, for a claim of a run leased before, that lease as the
	// claim's own write read it; nil otherwise.
	ended *tokenLease
}

// tokenLease is one token's lease of a run, over its life.
type tokenLease struct {
	owner    string
	acquired time.Time // when the store granted it (zero: its claim is not in the history)
	expires  time.Time // the latest expiry the store gave it
	renewals int
	released bool
	// releaseUnlogged: only the next claim's read saw the release (its
	// holder's process was killed between the commit and the line).
	releaseUnlogged bool
	// ended is the lease before, as this token's claim read it.
	ended *tokenLease
	// grants counts the claim lines of this token: a token granted twice
	// is a store that lost a write.
	grants int
}

// leaseHistory is every run's leases, by token.
type leaseHistory map[string]map[int64]*tokenLease

// parseLeaseDecisions reads the kit's lease lines from a process's log
// (slog's text format, as the demo runner and the plugin lines it relays
// write them).
func parseLeaseDecisions(log string) []leaseDecision {
	var out []leaseDecision
	for _, line := range strings.Split(log, "\n") {
		var d leaseDecision
		switch {
		case strings.Contains(line, `msg="lease claimed"`):
			d.what = "claimed"
		case strings.Contains(line, `msg="lease renewed"`):
			d.what = "renewed"
		case strings.Contains(line, `msg="lease released"`):
			d.what = "released"
		default:
			continue
		}
		attrs := logAttrs(line)
		d.runID, d.owner = attrs["run_id"], attrs["owner"]
		d.token, _ = strconv.ParseInt(attrs["token"], 10, 64)
		d.acquired, _ = time.Parse(time.RFC3339Nano, attrs["acquired_at"])
		d.expires, _ = time.Parse(time.RFC3339Nano, attrs["expires_at"])
		if tok, err := strconv.ParseInt(attrs["ended_token"], 10, 64); err == nil && d.what == "claimed" {
			expires, _ := time.Parse(time.RFC3339Nano, attrs["ended_expires_at"])
			d.ended = &tokenLease{owner: attrs["ended_owner"], expires: expires, released: attrs["ended_released"] == "true"}
			if tok != d.token-1 {
				d.ended = nil // not the lease before: judged by the holder's lines alone
			}
		}
		if d.runID != "" && d.token > 0 {
			out = append(out, d)
		}
	}
	return out
}

// logAttrs splits a text-format log line into its key=value attributes
// (a quoted value may hold spaces).
func logAttrs(line string) map[string]string {
	attrs := map[string]string{}
	for rest := line; rest != ""; {
		rest = strings.TrimLeft(rest, " ")
		key, after, ok := strings.Cut(rest, "=")
		if !ok || strings.Contains(key, " ") {
			break
		}
		var value string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				break
			}
			value, _ = strconv.Unquote(q)
			rest = after[len(q):]
		} else {
			value, rest, _ = strings.Cut(after, " ")
		}
		attrs[key] = value
	}
	return attrs
}

// add records decisions in the history.
func (h leaseHistory) add(decisions []leaseDecision) {
	for _, d := range decisions {
		runs := h[d.runID]
		if runs == nil {
			runs = map[int64]*tokenLease{}
			h[d.runID] = runs
		}
		l := runs[d.token]
		if l == nil {
			l = &tokenLease{}
			runs[d.token] = l
		}
		switch d.what {
		case "claimed":
			l.owner, l.acquired, l.ended = d.owner, d.acquired, d.ended
			l.grants++
			if d.expires.After(l.expires) {
				l.expires = d.expires
			}
		case "renewed":
			l.owner = d.owner
			l.renewals++
			if d.expires.After(l.expires) {
				l.expires = d.expires
			}
		case "released":
			l.released = true
		}
	}
}

// takeover is what the history says of a claim that ended another lease:
// the run's claim of token, granted at the store's time granted, over the
// lease of token-1.
type takeover struct {
	runID   string
	token   int64
	by      string // the new lease's owner
	granted time.Time
	// prev is the lease it ended; nil when the history lacks it.
	prev *tokenLease
}

// How a claim ended the lease before it.
const (
	endedUnknown  = "unknown"  // the history lacks the lease before
	endedReleased = "released" // its holder had released it
	endedOwn      = "own"      // a later incarnation of the holder's worker took it, as it may at once (LEASE-012)
	endedLapsed   = "lapsed"   // it had expired
	endedLive     = "live"     // it was live: the claim broke LEASE-001
)

// ended says how the claim ended the lease before it, by the store's times.
func (t takeover) ended() string {
	switch {
	case t.prev == nil:
		return endedUnknown
	case t.prev.released:
		return endedReleased
	}
	prevWorker, _, _ := strings.Cut(t.prev.owner, "/")
	byWorker, _, _ := strings.Cut(t.by, "/")
	switch {
	case prevWorker == byWorker && t.prev.owner != t.by: // another incarnation; the same one is blocked as anyone
		return endedOwn
	case !t.prev.expires.After(t.granted):
		return endedLapsed
	}
	return endedLive
}

// live reports whether the lease it ended still excluded the claimant
// when the store granted the claim.
func (t takeover) live() bool { return t.ended() == endedLive }

// lapsedFor is how long the ended lease had been expired when the claim
// was granted (negative: still live).
func (t takeover) lapsedFor() time.Duration { return t.granted.Sub(t.prev.expires) }

// describe tells the story of the takeover in the store's times, with the
// fleet's lease length and renewal cadence: when the holder last renewed,
// when its lease expired, and how late its next renewal was when the
// claim came.
func (t takeover) describe(lease, renew time.Duration) string {
	if t.prev == nil {
		return fmt.Sprintf("run %s: token %d granted to %s at %s over a lease the history lacks",
			t.runID, t.token, t.by, t.granted.Format(stamp))
	}
	lastRenewal := t.prev.expires.Add(-lease)
	claimed := "claim not in the history"
	if !t.prev.acquired.IsZero() {
		claimed = "claimed " + t.prev.acquired.Format(stamp)
	}
	s := fmt.Sprintf("run %s: token %d granted to %s at %s; token %d of %s (%s, %d renewals) was last renewed at %s, expired at %s",
		t.runID, t.token, t.by, t.granted.Format(stamp), t.token-1, t.prev.owner, claimed,
		t.prev.renewals, lastRenewal.Format(stamp), t.prev.expires.Format(stamp))
	switch t.ended() {
	case endedReleased:
		if t.prev.releaseUnlogged {
			return s + ", and was released before (the claim's read holds the release; its holder's line of it is missing)"
		}
		return s + ", and was released before"
	case endedOwn:
		return s + ", and its worker's later life took it"
	case endedLive:
		return s + fmt.Sprintf(": LIVE for %v more", -t.lapsedFor().Round(time.Millisecond))
	}
	overdue := t.granted.Sub(lastRenewal.Add(renew))
	return s + fmt.Sprintf(": lapsed %v before (its next renewal, due every %v, was %v late)",
		t.lapsedFor().Round(time.Millisecond), renew, overdue.Round(time.Millisecond))
}

const stamp = "15:04:05.000"

// takeovers returns every claim of the history that ended an earlier
// token's lease, in run and token order.
func (h leaseHistory) takeovers() []takeover {
	var out []takeover
	for runID, tokens := range h {
		for token := range tokens {
			if t, ok := h.find(runID, token); ok && token > 1 {
				out = append(out, t)
			}
		}
	}
	slices.SortFunc(out, func(a, b takeover) int {
		if c := strings.Compare(a.runID, b.runID); c != 0 {
			return c
		}
		return int(a.token - b.token)
	})
	return out
}

// find returns the claim that granted token on run; false when the
// history lacks it. The lease it ended is the holder's lines and the
// claim's read of it together: released if either says so (the store's
// read holds a release whose line its holder never wrote), and live until
// the later expiry of the two (a read that missed a committed renewal is a
// store that lost it).
func (h leaseHistory) find(runID string, token int64) (takeover, bool) {
	l := h[runID][token]
	if l == nil || l.acquired.IsZero() {
		return takeover{}, false
	}
	prev := h[runID][token-1]
	if read := l.ended; read != nil {
		merged := tokenLease{owner: read.owner, expires: read.expires, released: read.released}
		if prev != nil {
			merged = *prev
			merged.owner = cmp.Or(merged.owner, read.owner)
			if read.expires.After(merged.expires) {
				merged.expires = read.expires
			}
			merged.releaseUnlogged = read.released && !prev.released
			merged.released = prev.released || read.released
		}
		prev = &merged
	}
	return takeover{runID: runID, token: token, by: l.owner, granted: l.acquired, prev: prev}, true
}

// doubleGrants returns the runs and tokens the history holds more than
// one claim of.
func (h leaseHistory) doubleGrants() []string {
	var out []string
	for runID, tokens := range h {
		for token, l := range tokens {
			if l.grants > 1 {
				out = append(out, fmt.Sprintf("run %s: token %d granted %d times", runID, token, l.grants))
			}
		}
	}
	slices.Sort(out)
	return out
}

// Two workers of the tests below; w1 and w2 are different workers.
var (
	w1 = runstate.Owner{Worker: "w1", Incarnation: "100-a"}
	w2 = runstate.Owner{Worker: "w2", Incarnation: "300-c"}
)

// loggedStore is a memory store on a manual clock whose lease lines go to
// log, and claim, which claims a run for 2s or fails the test.
func loggedStore(t *testing.T) (runstate.Store, *conformance.ManualClock, *bytes.Buffer, func(string, runstate.Owner) runstate.Claim) {
	t.Helper()
	log := &bytes.Buffer{}
	clock := conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := memory.Open(context.Background(), memory.Options{Clock: clock, Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(id string, o runstate.Owner) runstate.Claim {
		t.Helper()
		cl, err := s.ClaimRun(context.Background(), runstate.ClaimRunParams{RunID: id, Owner: o, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	return s, clock, log, claim
}

// The history reads the kit's own lines and judges each takeover by the
// store's times: a takeover after expiry is allowed, with how long the
// lease had lapsed and how late the holder's renewal was; a takeover
// before it, by another worker, is not; a later incarnation of the same
// worker may take its predecessor's lease at once.
func TestTheLeaseHistoryJudgesEachTakeoverByTheStoresTimes(t *testing.T) {
	ctx := context.Background()
	s, clock, log, claim := loggedStore(t)
	start := clock.Now()
	w1again := runstate.Owner{Worker: "w1", Incarnation: "200-b"}
	lapsed, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	restarted, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	first := claim(lapsed.RunID, w1)
	claim(restarted.RunID, w1)
	clock.Advance(400 * time.Millisecond)
	s.RenewLease(ctx, runstate.RenewLeaseParams{RunID: lapsed.RunID, Token: first.Lease.Token, TTL: 2 * time.Second})
	claim(restarted.RunID, w1again) // at once: its own worker's earlier life
	clock.Advance(2*time.Second + 300*time.Millisecond)
	claim(lapsed.RunID, w2) // 300ms after the renewed lease expired

	h := leaseHistory{}
	h.add(parseLeaseDecisions(log.String()))
	tk, ok := h.find(lapsed.RunID, 2)
	if !ok || tk.ended() != endedLapsed || tk.lapsedFor() != 300*time.Millisecond || tk.prev.renewals != 1 || tk.prev.owner != "w1/100-a" {
		t.Fatalf("the takeover after expiry: %+v (prev %+v), want lapsed for 300ms after one renewal of w1/100-a", tk, tk.prev)
	}
	if got := tk.describe(2*time.Second, 400*time.Millisecond); !strings.Contains(got, "lapsed 300ms before (its next renewal, due every 400ms, was 1.9s late)") {
		t.Errorf("the takeover's story: %s", got)
	}
	if tk, ok := h.find(restarted.RunID, 2); !ok || tk.ended() != endedOwn {
		t.Errorf("a restarted worker's takeover of its own lease: %+v, want allowed", tk)
	}
	if n := len(h.takeovers()); n != 2 {
		t.Errorf("%d takeovers, want 2", n)
	}

	// A store that granted the claim 100ms before the lease expired.
	early := strings.ReplaceAll(log.String(), "acquired_at="+start.Add(2700*time.Millisecond).Format(time.RFC3339Nano), "acquired_at="+start.Add(2300*time.Millisecond).Format(time.RFC3339Nano))
	h = leaseHistory{}
	h.add(parseLeaseDecisions(early))
	if tk, _ := h.find(lapsed.RunID, 2); !tk.live() || !strings.Contains(tk.describe(2*time.Second, 400*time.Millisecond), "LIVE for 100ms more") {
		t.Errorf("a claim granted while the lease was live: %s", tk.describe(2*time.Second, 400*time.Millisecond))
	}
}

// A claim's line holds the lease it ended as its write read it, so the
// verdict holds up without the holder's lines: a release whose line its
// holder never wrote (killed between the commit and the line) is still a
// release. A renewal the holder logged that the claim's read missed is a
// store that lost a write, and a token granted twice is one too.
func TestTheLeaseHistoryReadsTheLeaseAsTheClaimReadIt(t *testing.T) {
	ctx := context.Background()
	s, clock, log, claim := loggedStore(t)
	start := clock.Now()
	released, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	lapsed, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	first := claim(released.RunID, w1)
	if err := s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: released.RunID, Token: first.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	claim(released.RunID, w2) // at once: released
	held := claim(lapsed.RunID, w1)
	clock.Advance(400 * time.Millisecond)
	s.RenewLease(ctx, runstate.RenewLeaseParams{RunID: lapsed.RunID, Token: held.Lease.Token, TTL: 2 * time.Second})
	clock.Advance(2300 * time.Millisecond)
	claim(lapsed.RunID, w2) // 300ms after the renewed lease expired

	var kept []string
	for _, line := range strings.Split(log.String(), "\n") {
		if !strings.Contains(line, `msg="lease released"`) { // w1 was killed before its release's line
			kept = append(kept, line)
		}
	}
	killed := strings.Join(kept, "\n")
	judge := func(log, runID string) takeover {
		t.Helper()
		h := leaseHistory{}
		h.add(parseLeaseDecisions(log))
		tk, ok := h.find(runID, 2)
		if !ok {
			t.Fatalf("the history lacks run %s's second claim", runID)
		}
		return tk
	}
	if tk := judge(killed, released.RunID); tk.ended() != endedReleased || !tk.prev.releaseUnlogged ||
		!strings.Contains(tk.describe(2*time.Second, 400*time.Millisecond), "its holder's line of it is missing") {
		t.Errorf("a claim after a release whose line is missing: %s, want released", tk.describe(2*time.Second, 400*time.Millisecond))
	}
	// The holder's lines alone would call it a claim of a live lease.
	var noRead []string
	for _, line := range kept {
		if i := strings.Index(line, " ended_token="); i >= 0 {
			line = line[:i]
		}
		noRead = append(noRead, line)
	}
	if tk := judge(strings.Join(noRead, "\n"), released.RunID); !tk.live() {
		t.Errorf("without the claim's read, the same claim: %s, want it judged live", tk.ended())
	}
	if tk := judge(killed, lapsed.RunID); tk.ended() != endedLapsed || tk.lapsedFor() != 300*time.Millisecond {
		t.Errorf("a claim 300ms after expiry: %s, lapsed for %v", tk.ended(), tk.lapsedFor())
	}
	// The holder logged a renewal the claim's read missed.
	renewal := fmt.Sprintf(`time=%s level=DEBUG msg="lease renewed" run_id=%s token=1 owner=w1/100-a acquired_at=%s expires_at=%s`,
		start.Format(time.RFC3339Nano), lapsed.RunID, start.Format(time.RFC3339Nano), start.Add(2900*time.Millisecond).Format(time.RFC3339Nano))
	if tk := judge(killed+"\n"+renewal, lapsed.RunID); !tk.live() || !strings.Contains(tk.describe(2*time.Second, 400*time.Millisecond), "LIVE for 200ms more") {
		t.Errorf("a claim whose read missed a renewal: %s", tk.describe(2*time.Second, 400*time.Millisecond))
	}
	// The same token granted twice.
	var twice string
	for _, line := range kept {
		if strings.Contains(line, `msg="lease claimed" run_id=`+lapsed.RunID+` token=2`) {
			twice = strings.Replace(line, "owner=w2/300-c", "owner=w3/400-d", 1)
		}
	}
	h := leaseHistory{}
	h.add(parseLeaseDecisions(killed + "\n" + twice))
	if got := h.doubleGrants(); len(got) != 1 || !strings.Contains(got[0], lapsed.RunID+": token 2 granted 2 times") {
		t.Errorf("double grants: %v", got)
	}
}
