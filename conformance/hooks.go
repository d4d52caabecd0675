package conformance

import (
	"context"

	"github.com/runstate/runstate"
)

// hooks run code between a store's operations, to stage races that timing
// alone would make rare.
type hooks struct {
	afterList  func(ctx context.Context)
	afterClaim func(ctx context.Context, runID string)
}

type hookedStore struct {
	runstate.RunStateStore
	h hooks
}

func (s hookedStore) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	page, err := s.RunStateStore.ListRuns(ctx, p)
	if err == nil && s.h.afterList != nil && len(page.Runs) > 0 {
		s.h.afterList(ctx)
	}
	return page, err
}

// Features implements runstate.RunStateStore: the store's, with its lease
// side hooked.
func (s hookedStore) Features() runstate.Features {
	f := runstate.Resolve(s.RunStateStore)
	if f.Leases != nil {
		f.Leases = hookedLeases{f.Leases, s.h}
	}
	return f
}

type hookedLeases struct {
	runstate.LeaseStore
	h hooks
}

func (s hookedLeases) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.LeaseStore.ClaimRun(ctx, p)
	if err == nil && s.h.afterClaim != nil {
		s.h.afterClaim(ctx, p.RunID)
	}
	return cl, err
}

// withHooks wraps store, keeping its features.
func withHooks(store runstate.RunStateStore, h hooks) runstate.RunStateStore {
	return hookedStore{store, h}
}
