package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/runstate/runstate/adapters/etcd/etcdtest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/etcdcluster"
)

// TestConformance runs the suite, and on a cluster of the test's own the
// FAULT rules with members killed: one, the leader, all three.
func TestConformance(t *testing.T) {
	t.Parallel() // each suite has a cluster of its own
	endpoints, cluster := etcdcluster.Require(t, t.TempDir())
	var members etcdtest.Cluster
	if cluster != nil {
		members = cluster
	}
	conformance.Run(t, etcdtest.Target(endpoints, true, members))
}

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the manual-clock run covers the same rules")
	}
	t.Parallel() // each suite has a cluster of its own
	endpoints, _ := etcdcluster.Require(t, t.TempDir())
	conformance.Run(t, conformance.Repeated(etcdtest.Target(endpoints, false, nil)))
}

// TestConformanceWithAMemberDown runs the suite on a cluster that has lost
// one member of three, its leader: the others elect a new one, a quorum
// serves every rule, and the client moves off the dead member's endpoint.
func TestConformanceWithAMemberDown(t *testing.T) {
	t.Parallel() // each suite has a cluster of its own
	endpoints, cluster := etcdcluster.Require(t, t.TempDir())
	if cluster == nil {
		t.Skip("the cluster is " + etcdcluster.EnvEndpoints + "'s, which the test must not disturb")
	}
	leader, err := cluster.Leader(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	// No faults: killing another member would leave no quorum.
	conformance.Run(t, conformance.Repeated(etcdtest.Target(endpoints, true, nil)))
}
