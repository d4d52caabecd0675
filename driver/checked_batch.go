package driver

// Checked passes each optional interface of the store it wraps through
// exactly when that store has it: a type assertion on the result tells the
// truth, as on the store itself. Go composes a method set only by type, so
// there is one type for each combination; this file lists them.

import "github.com/runstate/runstate"

// withBatches returns base (checkedRuns, checkedRunsAndLeases or
// checkedStore) with the batch interfaces inner implements.
func withBatches(base runstate.RunStateStore, inner runstate.RunStateStore) runstate.RunStateStore {
	key := 0
	switch base.(type) {
	case checkedRunsAndLeases:
		key = 8
	case checkedStore:
		key = 16
	}
	creator, ok := inner.(runstate.BatchCreator)
	if ok {
		key |= 1
	}
	updater, ok := inner.(runstate.BatchUpdater)
	if ok {
		key |= 2
	}
	claimer, ok := inner.(runstate.BatchClaimer)
	if ok && key >= 8 { // claims need leases
		key |= 4
	}
	switch key {
	case 1:
		return checkedRunsCreator{base.(checkedRuns), checkedCreator{creator}}
	case 2:
		return checkedRunsUpdater{base.(checkedRuns), checkedUpdater{updater}}
	case 3:
		return checkedRunsCreatorUpdater{base.(checkedRuns), checkedCreator{creator}, checkedUpdater{updater}}
	case 9:
		return checkedRunsAndLeasesCreator{base.(checkedRunsAndLeases), checkedCreator{creator}}
	case 10:
		return checkedRunsAndLeasesUpdater{base.(checkedRunsAndLeases), checkedUpdater{updater}}
	case 11:
		return checkedRunsAndLeasesCreatorUpdater{base.(checkedRunsAndLeases), checkedCreator{creator}, checkedUpdater{updater}}
	case 12:
		return checkedRunsAndLeasesClaimer{base.(checkedRunsAndLeases), checkedClaimer{claimer}}
	case 13:
		return checkedRunsAndLeasesCreatorClaimer{base.(checkedRunsAndLeases), checkedCreator{creator}, checkedClaimer{claimer}}
	case 14:
		return checkedRunsAndLeasesUpdaterClaimer{base.(checkedRunsAndLeases), checkedUpdater{updater}, checkedClaimer{claimer}}
	case 15:
		return checkedRunsAndLeasesCreatorUpdaterClaimer{base.(checkedRunsAndLeases), checkedCreator{creator}, checkedUpdater{updater}, checkedClaimer{claimer}}
	case 17:
		return checkedStoreCreator{base.(checkedStore), checkedCreator{creator}}
	case 18:
		return checkedStoreUpdater{base.(checkedStore), checkedUpdater{updater}}
	case 19:
		return checkedStoreCreatorUpdater{base.(checkedStore), checkedCreator{creator}, checkedUpdater{updater}}
	case 20:
		return checkedStoreClaimer{base.(checkedStore), checkedClaimer{claimer}}
	case 21:
		return checkedStoreCreatorClaimer{base.(checkedStore), checkedCreator{creator}, checkedClaimer{claimer}}
	case 22:
		return checkedStoreUpdaterClaimer{base.(checkedStore), checkedUpdater{updater}, checkedClaimer{claimer}}
	case 23:
		return checkedStoreCreatorUpdaterClaimer{base.(checkedStore), checkedCreator{creator}, checkedUpdater{updater}, checkedClaimer{claimer}}
	}
	return base
}

type checkedRunsCreator struct {
	checkedRuns
	checkedCreator
}

type checkedRunsUpdater struct {
	checkedRuns
	checkedUpdater
}

type checkedRunsCreatorUpdater struct {
	checkedRuns
	checkedCreator
	checkedUpdater
}

type checkedRunsAndLeasesCreator struct {
	checkedRunsAndLeases
	checkedCreator
}

type checkedRunsAndLeasesUpdater struct {
	checkedRunsAndLeases
	checkedUpdater
}

type checkedRunsAndLeasesCreatorUpdater struct {
	checkedRunsAndLeases
	checkedCreator
	checkedUpdater
}

type checkedRunsAndLeasesClaimer struct {
	checkedRunsAndLeases
	checkedClaimer
}

type checkedRunsAndLeasesCreatorClaimer struct {
	checkedRunsAndLeases
	checkedCreator
	checkedClaimer
}

type checkedRunsAndLeasesUpdaterClaimer struct {
	checkedRunsAndLeases
	checkedUpdater
	checkedClaimer
}

type checkedRunsAndLeasesCreatorUpdaterClaimer struct {
	checkedRunsAndLeases
	checkedCreator
	checkedUpdater
	checkedClaimer
}

type checkedStoreCreator struct {
	checkedStore
	checkedCreator
}

type checkedStoreUpdater struct {
	checkedStore
	checkedUpdater
}

type checkedStoreCreatorUpdater struct {
	checkedStore
	checkedCreator
	checkedUpdater
}

type checkedStoreClaimer struct {
	checkedStore
	checkedClaimer
}

type checkedStoreCreatorClaimer struct {
	checkedStore
	checkedCreator
	checkedClaimer
}

type checkedStoreUpdaterClaimer struct {
	checkedStore
	checkedUpdater
	checkedClaimer
}

type checkedStoreCreatorUpdaterClaimer struct {
	checkedStore
	checkedCreator
	checkedUpdater
	checkedClaimer
}
