package kvindex

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Index keys are built in one buffer; each must still be its prefix
// followed by the run's position, and none may share bytes with another.
func TestIndexKeysFollowTheLayout(t *testing.T) {
	created := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	run := runstate.RunSnapshot{RunID: "01RUN", WorkflowName: "deploy", Status: runstate.StatusWaiting, Priority: 7, CreatedAt: created,
		Labels: map[string]string{"team": "payments", "env": "prod"}}
	pos := append(Micros(created), run.RunID...)
	lease := driver.LeaseState{Owner: runstate.Owner{Worker: "w1", Incarnation: "i2"}, Token: 3, ExpiresAt: created.Add(time.Minute)}
	for _, l := range []Layout{{}, {Prefix: []byte("tenant/")}} {
		for _, tc := range []struct {
			name  string
			lease driver.LeaseState
			want  [][]byte
		}{
			{"unleased", driver.LeaseState{}, [][]byte{append(l.Queue(run.Status), append(InvPriority(7), pos...)...)}},
			{"leased", lease, [][]byte{append(l.Expiry(run.Status), append(Micros(lease.ExpiresAt), run.RunID...)...),
				append(l.OwnerIncarnation(lease.Owner), run.RunID...)}},
		} {
			want := append([][]byte{append(l.Created(), pos...), append(l.Status(run.Status), pos...),
				append(l.Workflow(run.WorkflowName), pos...), append(l.Label("env", "prod"), pos...),
				append(l.Label("team", "payments"), pos...)}, tc.want...)
			got := l.IndexKeys(run, tc.lease)
			if len(got) != len(want) {
				t.Fatalf("prefix %q, %s: %d keys, want %d", l.Prefix, tc.name, len(got), len(want))
			}
			for _, w := range want {
				found := 0
				for _, g := range got {
					if bytes.Equal(g, w) {
						found++
					}
				}
				if found != 1 {
					t.Errorf("prefix %q, %s: key %q found %d times in %q", l.Prefix, tc.name, w, found, got)
				}
			}
			// Appending to one key must not change the next.
			before := bytes.Clone(got[1])
			_ = append(got[0], 0xff)
			if !bytes.Equal(got[1], before) {
				t.Errorf("prefix %q, %s: keys share a buffer's tail", l.Prefix, tc.name)
			}
		}
	}
}

// An iterator or a range read returns keys in byte order: the claim-order
// index must sort as claim order does (priority down, then created_at and
// run_id up, times before 1970 included), and the listing indexes as
// ListRuns order.
func TestIndexKeysSortAsTheirOrders(t *testing.T) {
	l := Layout{Prefix: []byte("p/")}
	base := time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC)
	var runs []runstate.RunSnapshot
	for i := range 300 {
		runs = append(runs, runstate.RunSnapshot{
			RunID:     string(rune('a'+rand.IntN(3))) + strings.Repeat("z", rand.IntN(3)),
			Status:    runstate.StatusQueued,
			Priority:  rand.IntN(7) - 3 + []int{0, runstate.MinPriority + 3, runstate.MaxPriority - 3}[i%3],
			CreatedAt: base.Add(time.Duration(rand.IntN(120)) * time.Second),
		})
	}
	queueKey := func(r runstate.RunSnapshot) []byte { ks := l.IndexKeys(r, driver.LeaseState{}); return ks[len(ks)-1] }
	createdKey := func(r runstate.RunSnapshot) []byte { return l.IndexKeys(r, driver.LeaseState{})[0] }
	for i, a := range runs {
		b := runs[(i+1)%len(runs)]
		if !bytes.HasPrefix(queueKey(a), l.Queue(a.Status)) || !bytes.HasPrefix(createdKey(a), l.Created()) {
			t.Fatalf("index keys of %+v: %q, %q; not under their prefixes", a, queueKey(a), createdKey(a))
		}
		if got, want := bytes.Compare(queueKey(a), queueKey(b)), driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b)); got != want {
			t.Errorf("claim order of %+v and %+v: keys compare %d, positions %d", a, b, got, want)
		}
		if got, want := bytes.Compare(createdKey(a), createdKey(b)), driver.PositionOf(a).Compare(driver.PositionOf(b)); got != want {
			t.Errorf("list order of %+v and %+v: keys compare %d, positions %d", a, b, got, want)
		}
		if id := RunIDOf(queueKey(a), len(l.Queue(a.Status))+ClaimWidth); id != a.RunID {
			t.Errorf("RunIDOf(claim-order key of %s) = %q", a.RunID, id)
		}
		if got := ParseMicros(createdKey(a)[len(l.Created()):][:PositionWidth]); !got.Equal(a.CreatedAt) {
			t.Errorf("ParseMicros(list key of %+v) = %v", a, got)
		}
		// The key after a position is past the position's own key and
		// before every later one.
		after := QueuePosAfter(l.Queue(a.Status), driver.RunnablePositionOf(a))
		if bytes.Compare(after, queueKey(a)) <= 0 || (driver.RunnablePositionOf(a).Less(driver.RunnablePositionOf(b)) && bytes.Compare(after, queueKey(b)) > 0) {
			t.Errorf("QueuePosAfter(%+v) = %q, not between its key and the next", a, after)
		}
		after = RunPosAfter(l.Created(), driver.PositionOf(a))
		if bytes.Compare(after, createdKey(a)) <= 0 || (driver.PositionOf(a).Compare(driver.PositionOf(b)) < 0 && bytes.Compare(after, createdKey(b)) > 0) {
			t.Errorf("RunPosAfter(%+v) = %q, not between its key and the next", a, after)
		}
	}
}

// A write moves only the index keys that change: a claim takes the run
// out of the claim order and into the expiry and owner indexes.
func TestIndexChangesOfAClaim(t *testing.T) {
	l := Layout{Prefix: []byte("p/")}
	run := runstate.RunSnapshot{RunID: "r1", WorkflowName: "wf", Status: runstate.StatusQueued, CreatedAt: time.Unix(100, 0).UTC(),
		Labels: map[string]string{"team": "a"}}
	lease := driver.LeaseState{Owner: runstate.Owner{Worker: "w", Incarnation: "i"}, Token: 1, ExpiresAt: time.Unix(200, 0).UTC()}
	del, set := l.IndexChanges(&Indexed{Run: run}, Indexed{Run: run, Lease: lease})
	if len(del) != 1 || !bytes.HasPrefix(del[0], l.Queue(run.Status)) {
		t.Errorf("a claim deletes %q, want the claim-order key alone", del)
	}
	want := [][]byte{append(append(l.Expiry(run.Status), Micros(lease.ExpiresAt)...), "r1"...), append(l.OwnerIncarnation(lease.Owner), "r1"...)}
	if len(set) != 2 || !bytes.Equal(set[0], want[0]) || !bytes.Equal(set[1], want[1]) {
		t.Errorf("a claim sets %q, want %q", set, want)
	}
	if del, set := l.IndexChanges(nil, Indexed{Run: run}); del != nil || len(set) != 5 {
		t.Errorf("a new run deletes %q and sets %d keys, want nothing and 5", del, len(set))
	}
}

// A listing walks the most selective index its filter allows.
func TestListPrefixesPickTheMostSelectiveIndex(t *testing.T) {
	var l Layout
	for _, tc := range []struct {
		filter driver.RunFilter
		want   [][]byte
	}{
		{driver.RunFilter{Statuses: []runstate.RunStatus{"queued", "running", "queued"}, WorkflowName: "wf"}, [][]byte{l.Status("queued"), l.Status("running")}},
		{driver.RunFilter{WorkflowName: "wf", Labels: map[string]string{"a": "1"}}, [][]byte{l.Workflow("wf")}},
		{driver.RunFilter{Labels: map[string]string{"z": "9", "a": "1"}}, [][]byte{l.Label("a", "1")}},
		{driver.RunFilter{}, [][]byte{l.Created()}},
	} {
		got := l.ListPrefixes(tc.filter)
		if len(got) != len(tc.want) {
			t.Fatalf("ListPrefixes(%+v) = %q, want %q", tc.filter, got, tc.want)
		}
		for i := range got {
			if !bytes.Equal(got[i], tc.want[i]) {
				t.Errorf("ListPrefixes(%+v) = %q, want %q", tc.filter, got, tc.want)
			}
		}
	}
}
