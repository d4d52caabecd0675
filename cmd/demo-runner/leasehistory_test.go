package main

import (
	"bytes"
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
// clock. The processes that decide are the workers and operator commands
// themselves (SQL and etcd stores), the plugin processes under them (whose
// lines reach their host's log), or whichever process holds a Badger
// directory. Read together, their logs tell for every claim whether the
// lease it ended was still live when the store granted it.
//
// What a log cannot hold: a decision whose process was killed between the
// commit and the line, or before a plugin's line was relayed to its host;
// and a write whose caller stopped waiting before its answer (a renewal
// past its deadline, which the store may still commit: the kit logs what
// it answers). The store may then hold a later expiry than the history
// shows. None of them can make a claim look as if it took a live lease;
// each could hide one, and a takeover whose ended lease the history lacks
// is reported as not judged.

// leaseDecision is one line of the history.
type leaseDecision struct {
	what     string // claimed, renewed or released
	runID    string
	token    int64
	owner    string    // worker/incarnation; empty for a release
	acquired time.Time // store time; zero for a release
	expires  time.Time // store time; zero for a release
}

// tokenLease is one token's lease of a run, over its life.
type tokenLease struct {
	owner    string
	acquired time.Time // when the store granted it (zero: its claim is not in the history)
	expires  time.Time // the latest expiry the store gave it
	renewals int
	released bool
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
			l.owner, l.acquired = d.owner, d.acquired
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
	s := fmt.Sprintf("run %s: token %d granted to %s at %s; token %d of %s (claimed %s, %d renewals) was last renewed at %s, expired at %s",
		t.runID, t.token, t.by, t.granted.Format(stamp), t.token-1, t.prev.owner, t.prev.acquired.Format(stamp),
		t.prev.renewals, lastRenewal.Format(stamp), t.prev.expires.Format(stamp))
	switch t.ended() {
	case endedReleased:
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
// history lacks it.
func (h leaseHistory) find(runID string, token int64) (takeover, bool) {
	l := h[runID][token]
	if l == nil || l.acquired.IsZero() {
		return takeover{}, false
	}
	return takeover{runID: runID, token: token, by: l.owner, granted: l.acquired, prev: h[runID][token-1]}, true
}

// The history reads the kit's own lines and judges each takeover by the
// store's times: a takeover after expiry is allowed, with how long the
// lease had lapsed and how late the holder's renewal was; a takeover
// before it, by another worker, is not; a later incarnation of the same
// worker may take its predecessor's lease at once.
func TestTheLeaseHistoryJudgesEachTakeoverByTheStoresTimes(t *testing.T) {
	ctx := context.Background()
	var log bytes.Buffer
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := conformance.NewManualClock(start)
	s, err := memory.Open(ctx, memory.Options{Clock: clock, Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	w1 := runstate.Owner{Worker: "w1", Incarnation: "100-a"}
	w1again := runstate.Owner{Worker: "w1", Incarnation: "200-b"}
	w2 := runstate.Owner{Worker: "w2", Incarnation: "300-c"}
	lapsed, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	restarted, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	claim := func(id string, o runstate.Owner) runstate.Claim {
		cl, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: id, Owner: o, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
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
