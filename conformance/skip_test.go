package conformance_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
)

// A rule skipped for an optional interface says what the store lacks in
// the terms of what its author wrote or can add, names the interface,
// and names no Go type of the store's: the kit's store and driver.Checked
// are wrappers whose type tells an author nothing. The verdict names the
// interface the profile lacks.
func TestSkipReasonsSayWhatTheStoreLacks(t *testing.T) {
	ctx := context.Background()
	// The kit's store of a driver without driver.BatchInserter, as an
	// integrator's first driver is.
	kit := driverTarget(func(d *mapDriver) driver.Driver { return d })
	// A store of its own behind driver.Checked, without batches: the
	// wrapper's type (driver.checkedStore) is what skips used to name.
	checked := brokenTarget(func(m *memory.Store) runstate.RunStateStore {
		return driver.Checked(featuretest.Edit(m, func(f *runstate.Features) { *f = runstate.Features{Leases: f.Leases} }))
	})
	for _, c := range []struct {
		target            conformance.Target
		rule, lacks, want string
	}{
		{kit, "BATCH-001", "runstate.BatchCreator", "the store creates runs one at a time: it has no batch create, all runs or none " +
			"(runstate.BatchCreator; driver.Wrap gives it to a driver that implements driver.BatchInserter)"},
		{checked, "BATCH-006", "runstate.BatchClaimer", "the store claims runs one at a time: it has no batch claim " +
			"(runstate.BatchClaimer; driver.Wrap gives it to every driver, a store of your own implements it)"},
		{checked, "LEASE-021", "runstate.LeaseReader", "the store cannot be asked for a run's lease: it has no GetLease " +
			"(runstate.LeaseReader; driver.Wrap gives it to every driver, a store of your own implements it)"},
	} {
		rules, err := conformance.Select([]string{c.rule}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res := conformance.RunRule(ctx, c.target, rules[0])
		if res.Outcome != conformance.Skip || res.Detail != c.want || res.Lacks != c.lacks {
			t.Errorf("%s: %s, %q, lacks %q\nwant skip, %q, lacks %q", c.rule, res.Outcome, res.Detail, res.Lacks, c.want, c.lacks)
		}
		modes := []conformance.ModeResults{{Mode: "m", Capabilities: c.target.Capabilities, Results: []conformance.Result{res}}}
		profile := conformance.Profile{ID: conformance.ProfileOf(rules[0])}
		if v := conformance.Verdicts([]conformance.Profile{profile}, modes, nil)[0]; !slices.Contains(v.Lacks, c.lacks) {
			t.Errorf("%s: the %s verdict lacks %v, want %s among them", c.rule, profile.ID, v.Lacks, c.lacks)
		}
	}
	// Every skip of an optional interface, on the store with none of them.
	all, err := conformance.Select([]string{"BATCH", "LEASE-021", "WATCH"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range conformance.RunRules(ctx, checked, all, nil) {
		if res.Outcome != conformance.Skip || res.Lacks == "" || !strings.Contains(res.Detail, "the store ") ||
			strings.Contains(res.Detail, "does not implement") || strings.Contains(res.Detail, "checked") || strings.Contains(res.Detail, "struct") {
			t.Errorf("%s: %s, %q (lacks %q): want a skip saying what the store lacks, naming no Go type of its own", res.Rule.ID, res.Outcome, res.Detail, res.Lacks)
		}
	}
}
