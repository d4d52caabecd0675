package badger

import (
	"bytes"
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
	pos := append(micros(created), run.RunID...)
	lease := driver.LeaseState{Owner: runstate.Owner{Worker: "w1", Incarnation: "i2"}, Token: 3, ExpiresAt: created.Add(time.Minute)}
	for _, tc := range []struct {
		name  string
		lease driver.LeaseState
		want  [][]byte
	}{
		{"unleased", driver.LeaseState{}, [][]byte{append(queuePrefix(run.Status), append(invPriority(7), pos...)...)}},
		{"leased", lease, [][]byte{append(expiryPrefix(run.Status), append(micros(lease.ExpiresAt), run.RunID...)...),
			append(ownerIncarnationPrefix(lease.Owner), run.RunID...)}},
	} {
		want := append([][]byte{append(createdPrefix(), pos...), append(statusPrefix(run.Status), pos...),
			append(workflowPrefix(run.WorkflowName), pos...), append(labelPrefix("env", "prod"), pos...),
			append(labelPrefix("team", "payments"), pos...)}, tc.want...)
		got := indexKeys(run, tc.lease)
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys, want %d", tc.name, len(got), len(want))
		}
		for _, w := range want {
			found := 0
			for _, g := range got {
				if bytes.Equal(g, w) {
					found++
				}
			}
			if found != 1 {
				t.Errorf("%s: key %q found %d times in %q", tc.name, w, found, got)
			}
		}
		// Appending to one key must not change the next.
		before := bytes.Clone(got[1])
		_ = append(got[0], 0xff)
		if !bytes.Equal(got[1], before) {
			t.Errorf("%s: keys share a buffer's tail", tc.name)
		}
	}
}
