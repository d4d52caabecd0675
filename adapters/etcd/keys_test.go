package etcd

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// The claim order and the listing orders of the keys are kvindex's
// (TestIndexKeysSortAsTheirOrders there); here, the string view etcd's
// client takes.

// A write moves only the index keys that change: a claim takes the run
// out of the claim order and into the expiry and owner indexes.
func TestIndexChangesOfAClaim(t *testing.T) {
	k := newKeys("p/")
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
