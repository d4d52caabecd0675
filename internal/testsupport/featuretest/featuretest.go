// Package featuretest makes stores with other features than the store
// they wrap: a test's store without batches, without leases, or with a
// feature of its own.
package featuretest

import (
	"fmt"

	"github.com/runstate/runstate"
)

// Edited is a store whose Features are those of the store it wraps,
// changed by Edit; every call goes to the store it wraps.
type Edited struct {
	runstate.RunStateStore
	Edit func(*runstate.Features)
}

// Features implements runstate.RunStateStore.
func (e Edited) Features() runstate.Features {
	f := runstate.Resolve(e.RunStateStore)
	e.Edit(&f)
	return f
}

// Edit returns s with its features changed by edit.
func Edit(s runstate.RunStateStore, edit func(*runstate.Features)) runstate.RunStateStore {
	return Edited{s, edit}
}

// WithoutBatches returns s without its batch features.
func WithoutBatches(s runstate.RunStateStore) runstate.RunStateStore {
	return Edit(s, func(f *runstate.Features) { f.BatchCreator, f.BatchUpdater, f.BatchClaimer = nil, nil, nil })
}

// WithoutLeases returns s without its lease side, and the features that
// need it.
func WithoutLeases(s runstate.RunStateStore) runstate.RunStateStore {
	return Edit(s, func(f *runstate.Features) {
		f.Leases, f.LeaseReader, f.BatchClaimer, f.RunnableWatcher = nil, nil, nil, nil
	})
}

// Must returns feature, as runstate.As gives it, and panics when the store
// lacks it (ok false): for a test, whose store must have it.
func Must[T any](feature T, ok bool) T {
	if !ok {
		panic(fmt.Sprintf("the store lacks the feature %T", &feature))
	}
	return feature
}
