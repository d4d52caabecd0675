package plugin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
	"github.com/runstate/runstate/plugin/plugintest"
)

// A plugin process target with a backend puts a fault proxy between the
// plugin and its database: a partition there stops the plugin's calls
// (they end by their deadline), and once healed the same handle works.
func TestAPluginReachesItsBackendThroughTheProxy(t *testing.T) {
	srv := sqltest.Postgres.Find(t)
	backend, dsn := sqltest.PostgresBehindProxy(t, srv.DSN(), plugintest.ProxyPlaceholder)
	schema := srv.NewSchemaName()
	defer srv.DropSchema(context.Background(), schema)
	target := plugintest.ProcessTargetWith(plugintest.ProcessParams{Name: "postgres", Version: "postgres", Path: bin(t, pgPkg),
		Caps:    conformance.Capabilities{Leases: true, Faults: faultproxy.Faults},
		Backend: backend,
		Config: func(context.Context) (map[string]string, func(), error) {
			return map[string]string{"dsn": dsn, "schema": schema}, func() {}, nil
		}})
	ctx := context.Background()
	h, err := target.NewHarness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	store := h.Store()
	run, err := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	faults := h.(conformance.FaultInjector)
	if err := faults.StartFault(ctx, conformance.FaultParams{Fault: conformance.FaultPartition}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = store.GetRun(short, run.RunID)
	cancel()
	if err == nil {
		t.Fatal("a read succeeded during a partition between the plugin and its database: the plugin does not reach it through the proxy")
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, runstate.ErrUnavailable) {
		t.Errorf("a read during the partition: %v, want the deadline or UNAVAILABLE", err)
	}
	if err := faults.EndFault(ctx); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for {
		_, err := store.GetRun(ctx, run.RunID)
		if err == nil {
			break
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("the plugin does not reach its database again after the partition: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
