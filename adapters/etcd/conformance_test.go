package etcd_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/etcd/etcdtest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/etcdcluster"
)

func TestConformance(t *testing.T) {
	endpoints, _ := etcdcluster.Require(t, t.TempDir())
	conformance.Run(t, etcdtest.Target(endpoints, true))
}

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the manual-clock run covers the same rules")
	}
	endpoints, _ := etcdcluster.Require(t, t.TempDir())
	conformance.Run(t, etcdtest.Target(endpoints, false))
}
