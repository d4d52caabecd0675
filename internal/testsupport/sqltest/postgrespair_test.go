package sqltest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate/conformance"
)

// A failover that stops part-way (the primary killed, the standby not
// promoted) leaves the pair refusing to go on: the fault's end does not
// rebuild the surviving standby from the dead primary, which would erase
// the only copy of the data, and it says why the failover stopped.
func TestAFailoverThatStopsPartWayRebuildsNothing(t *testing.T) {
	pair := StartPostgresPair(t, PairOptions{Synchronous: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	standby := pair.nodes[1-pair.primary]
	// A file the standby's rebuild would remove with its data directory.
	marker := filepath.Join(standby.data, "kept-by-the-test")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := standby.Kill(); err != nil {
		t.Fatal(err)
	}

	failed := pair.StartFault(ctx, conformance.FaultParams{Fault: conformance.FaultFailover})
	if failed == nil {
		t.Fatal("StartFault with the standby down succeeded")
	}
	if !strings.Contains(failed.Error(), "a failover did not complete") || !strings.Contains(failed.Error(), "promoting "+standby.name) {
		t.Errorf("StartFault with the standby down = %v, want the failover named as not completed at promoting %s", failed, standby.name)
	}
	if err := pair.EndFault(ctx); !errors.Is(err, failed) {
		t.Errorf("EndFault after it = %v, want the failover's error %v", err, failed)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the standby's data directory was rebuilt: %v", err)
	}
	if err := pair.Failover(ctx); !errors.Is(err, failed) {
		t.Errorf("Failover after it = %v, want the failover's error", err)
	}
	if got := pair.Timings(); len(got.Failovers) != 0 || len(got.Rebuilds) != 0 {
		t.Errorf("timings %+v, want none recorded", got)
	}
}
