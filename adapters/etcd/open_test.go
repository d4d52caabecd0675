package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/etcd"
	"github.com/runstate/runstate/internal/testsupport/etcdcluster"
	"github.com/runstate/runstate/stores"
)

// TestOpen covers what the conformance suite does not: options, the store
// name, prefixes, the transaction size limit and the layout check.
func TestOpen(t *testing.T) {
	endpoints, _ := etcdcluster.Require(t, t.TempDir())
	ctx := context.Background()
	prefix := func(name string) string { return "runstate-open-test/" + t.Name() + "/" + name + "/" }

	t.Run("no endpoints", func(t *testing.T) {
		_, err := etcd.Open(ctx, etcd.Options{Endpoints: []string{" ", ""}})
		if !errors.Is(err, runstate.ErrInvalidArgument) || !strings.Contains(err.Error(), "endpoints") {
			t.Fatalf("Open without endpoints: %v, want INVALID_ARGUMENT naming endpoints", err)
		}
	})

	t.Run("by name, shared by prefix", func(t *testing.T) {
		name := "etcd:" + strings.Join(endpoints, ",") + "?prefix=" + url.QueryEscape(prefix("shared"))
		a, err := stores.Open(ctx, name, stores.Options{})
		if err != nil {
			t.Fatalf("stores.Open(%s): %v", name, err)
		}
		defer a.Close()
		// A plugin's configuration gives the prefix as a setting.
		c, err := stores.Open(ctx, "etcd:"+strings.Join(endpoints, ","), stores.Options{Settings: map[string]string{"prefix": prefix("shared")}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b, err := etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: prefix("shared")})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		other, err := etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: prefix("other")})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		run, err := a.Runs.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []runstate.RunStateStore{b, c.Runs} {
			if got, err := h.GetRun(ctx, run.RunID); err != nil || got.Version != run.Version {
				t.Errorf("another handle on the prefix: GetRun = %+v, %v; want the run", got, err)
			}
		}
		if _, err := other.GetRun(ctx, run.RunID); !errors.Is(err, runstate.ErrNotFound) {
			t.Errorf("a handle on another prefix: GetRun = %v, want NOT_FOUND", err)
		}
	})

	t.Run("bad name", func(t *testing.T) {
		for name, want := range map[string]string{
			"etcd:127.0.0.1:2379,,127.0.0.1:2380":   "empty endpoint",
			"etcd:127.0.0.1:2379?schema=x":          `"schema"`,
			"etcd:127.0.0.1:2379?prefix=a&prefix=b": `"prefix"`,
		} {
			if err := stores.Check(name); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Check(%s): %v, want an error naming %s", name, err, want)
			}
		}
	})

	t.Run("a write over max_txn_ops is refused whole", func(t *testing.T) {
		s, err := etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: prefix("txnops"), MaxTxnOps: 16})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		runs := make([]runstate.CreateRunParams, 20)
		for i := range runs {
			runs[i] = runstate.CreateRunParams{WorkflowName: "wf", RunID: fmt.Sprintf("run-%d", i)}
		}
		_, err = s.CreateRuns(ctx, runstate.CreateRunsParams{Runs: runs})
		if !errors.Is(err, runstate.ErrInvalidArgument) || !strings.Contains(err.Error(), "max-txn-ops") {
			t.Fatalf("CreateRuns of 20 runs with MaxTxnOps 16: %v, want INVALID_ARGUMENT naming --max-txn-ops", err)
		}
		page, err := s.ListRuns(ctx, runstate.ListRunsParams{})
		if err != nil || len(page.Runs) != 0 {
			t.Errorf("after the refused batch: %d runs (%v), want none", len(page.Runs), err)
		}
		// Claims of many runs fit: a batch claims what one transaction holds.
		if _, err := s.CreateRuns(ctx, runstate.CreateRunsParams{Runs: runs[:2]}); err != nil {
			t.Fatal(err)
		}
		res, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: runstate.DefaultRecoveryLeaseTTL, Max: 10})
		if err != nil || len(res.Claims) == 0 {
			t.Errorf("ClaimRuns with MaxTxnOps 16: %d claims, %v; want at least one", len(res.Claims), err)
		}
	})

	t.Run("concurrent writes of many runs each fit a transaction", func(t *testing.T) {
		s, err := etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: prefix("concurrent")})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const writers = 64 // many more than 128 operations together
		runs := make([]runstate.RunSnapshot, writers)
		for i := range runs {
			if runs[i], err = s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"}); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan error, writers)
		for _, r := range runs {
			go func() {
				_, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: "running"})
				errs <- err
			}()
		}
		for range writers {
			if err := <-errs; err != nil {
				t.Errorf("a concurrent UpdateRun: %v", err)
			}
		}
	})

	t.Run("a prefix of another layout is refused", func(t *testing.T) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		p := prefix("layout")
		if _, err := cli.Put(ctx, p+"m\x00schema", "99"); err != nil {
			t.Fatal(err)
		}
		_, err = etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: p})
		if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), `"99"`) {
			t.Errorf("Open on a prefix of layout 99: %v, want UNAVAILABLE naming the layout", err)
		}
	})

	t.Run("a prefix of the layout before parked runs is moved to today's", func(t *testing.T) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		p := prefix("layout1")
		if _, err := cli.Put(ctx, p+"m\x00schema", "1"); err != nil {
			t.Fatal(err)
		}
		s, err := etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: p})
		if err != nil {
			t.Fatalf("Open on a prefix of layout 1: %v", err)
		}
		s.Close()
		resp, err := cli.Get(ctx, p+"m\x00schema")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
			t.Errorf("the layout after Open: %v, %v; want 2", resp, err)
		}
	})

	t.Run("closed", func(t *testing.T) {
		s, err := etcd.Open(ctx, etcd.Options{Endpoints: endpoints, Prefix: prefix("closed")})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetRun(ctx, "x"); !errors.Is(err, runstate.ErrUnavailable) {
			t.Errorf("GetRun after Close: %v, want UNAVAILABLE", err)
		}
	})
}
