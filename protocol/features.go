package protocol

import (
	"slices"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// A store's features cross the wire by name, in OpenResponse.features: the
// server names what its store can do, and the client's store has exactly
// those (docs/protocol.md, "Features"). The names are part of the
// protocol and never change.
const (
	FeatureLeases        = "leases"
	FeatureLeaseReader   = "lease_reader"
	FeatureBatchCreate   = "batch_create"
	FeatureBatchUpdate   = "batch_update"
	FeatureBatchClaim    = "batch_claim"
	FeatureWatchRunnable = "watch_runnable"
	FeatureWatchRun      = "watch_run"
)

// storeFeatures pairs each store feature's name with whether a
// runstate.Features has it and how the client's store gives it, one row
// per field of runstate.Features (TestEveryCombinationOfFeaturesSurvivesEveryWrapper
// fails on a field without one).
var storeFeatures = []struct {
	name string
	has  func(runstate.Features) bool
	set  func(*runstate.Features, *RemoteStore)
}{
	{FeatureLeases, func(f runstate.Features) bool { return f.Leases != nil }, func(f *runstate.Features, r *RemoteStore) { f.Leases = r }},
	{FeatureLeaseReader, func(f runstate.Features) bool { return f.LeaseReader != nil }, func(f *runstate.Features, r *RemoteStore) { f.LeaseReader = r }},
	{FeatureBatchCreate, func(f runstate.Features) bool { return f.BatchCreator != nil }, func(f *runstate.Features, r *RemoteStore) { f.BatchCreator = remoteCreator{r} }},
	{FeatureBatchUpdate, func(f runstate.Features) bool { return f.BatchUpdater != nil }, func(f *runstate.Features, r *RemoteStore) { f.BatchUpdater = remoteUpdater{r} }},
	{FeatureBatchClaim, func(f runstate.Features) bool { return f.BatchClaimer != nil }, func(f *runstate.Features, r *RemoteStore) { f.BatchClaimer = remoteClaimer{r} }},
	{FeatureWatchRunnable, func(f runstate.Features) bool { return f.RunnableWatcher != nil }, func(f *runstate.Features, r *RemoteStore) { f.RunnableWatcher = r }},
	{FeatureWatchRun, func(f runstate.Features) bool { return f.RunWatcher != nil }, func(f *runstate.Features, r *RemoteStore) { f.RunWatcher = r }},
}

// featureNames names the features f has.
func featureNames(f runstate.Features) []string {
	var names []string
	for _, sf := range storeFeatures {
		if sf.has(f) {
			names = append(names, sf.name)
		}
	}
	return names
}

// featuresOfResponse reads the features an Open answer names: its list,
// or, from a server older than the list, its fields (with leases, a
// server of that age could always tell who holds one).
func featuresOfResponse(resp *pb.OpenResponse) []string {
	if len(resp.Features) > 0 {
		return resp.Features
	}
	var names []string
	add := func(on bool, name string) {
		if on {
			names = append(names, name)
		}
	}
	add(resp.Leases, FeatureLeases)
	add(resp.Leases, FeatureLeaseReader)
	add(resp.CreateRuns, FeatureBatchCreate)
	add(resp.UpdateRuns, FeatureBatchUpdate)
	add(resp.ClaimRuns && resp.Leases, FeatureBatchClaim)
	add(resp.WatchRunnable && resp.Leases, FeatureWatchRunnable)
	add(resp.WatchRun, FeatureWatchRun)
	return names
}

// Has reports whether the server named the feature.
func (i StoreInfo) Has(feature string) bool { return slices.Contains(i.Features, feature) }
