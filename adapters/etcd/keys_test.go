package etcd

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// A range read returns keys in byte order: the claim-order index must sort
// as claim order does (priority down, then created_at and run_id up,
// times before 1970 included), and the listing indexes as ListRuns order.
func TestIndexKeysSortAsTheirOrders(t *testing.T) {
	k := keys{prefix: "p/"}
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
	queueKey := func(r runstate.RunSnapshot) string { ks := k.indexKeys(r, driver.LeaseState{}); return ks[len(ks)-1] }
	createdKey := func(r runstate.RunSnapshot) string { return k.indexKeys(r, driver.LeaseState{})[0] }
	for i, a := range runs {
		b := runs[(i+1)%len(runs)]
		if !strings.HasPrefix(queueKey(a), k.queue(a.Status)) || !strings.HasPrefix(createdKey(a), k.created()) {
			t.Fatalf("index keys of %+v: %q, %q; not under their prefixes", a, queueKey(a), createdKey(a))
		}
		if got, want := strings.Compare(queueKey(a), queueKey(b)), driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b)); got != want {
			t.Errorf("claim order of %+v and %+v: keys compare %d, positions %d", a, b, got, want)
		}
		if got, want := strings.Compare(createdKey(a), createdKey(b)), driver.PositionOf(a).Compare(driver.PositionOf(b)); got != want {
			t.Errorf("list order of %+v and %+v: keys compare %d, positions %d", a, b, got, want)
		}
		// The key after a position is past the position's own key and
		// before every later one.
		after := queuePosAfter(k.queue(a.Status), driver.RunnablePositionOf(a))
		if after <= queueKey(a) || (driver.RunnablePositionOf(a).Less(driver.RunnablePositionOf(b)) && after > queueKey(b)) {
			t.Errorf("queuePosAfter(%+v) = %q, not between its key and the next", a, after)
		}
	}
}

// A write moves only the index keys that change: a claim takes the run
// out of the claim order and into the expiry and owner indexes.
func TestIndexChangesOfAClaim(t *testing.T) {
	k := keys{prefix: "p/"}
	run := runstate.RunSnapshot{RunID: "r1", WorkflowName: "wf", Status: runstate.StatusQueued, CreatedAt: time.Unix(100, 0).UTC(),
		Labels: map[string]string{"team": "a"}}
	lease := driver.LeaseState{Owner: runstate.Owner{Worker: "w", Incarnation: "i"}, Token: 1, ExpiresAt: time.Unix(200, 0).UTC()}
	del, put := k.indexChanges(&storedRun{Run: run}, storedRun{Run: run, Lease: lease})
	if len(del) != 1 || !strings.HasPrefix(del[0], k.queue(run.Status)) {
		t.Errorf("a claim deletes %q, want the claim-order key alone", del)
	}
	slices.Sort(put)
	if want := []string{k.ownerIncarnation(lease.Owner) + "r1", k.expiry(run.Status) + micros(lease.ExpiresAt) + "r1"}; !slices.Equal(put, want) {
		t.Errorf("a claim puts %q, want %q", put, want)
	}
}
