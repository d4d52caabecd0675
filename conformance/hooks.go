package conformance

import (
	"context"

	"github.com/runstate/runstate/spec"
)

// hooks run code between a store's operations, to stage races that timing
// alone would make rare.
type hooks struct {
	afterList  func(ctx context.Context)
	afterClaim func(ctx context.Context, runID string)
}

type hookedStore struct {
	spec.RunStateStore
	h hooks
}

func (s hookedStore) ListRuns(ctx context.Context, p spec.ListRunsParams) (spec.RunPage, error) {
	page, err := s.RunStateStore.ListRuns(ctx, p)
	if err == nil && s.h.afterList != nil && len(page.Runs) > 0 {
		s.h.afterList(ctx)
	}
	return page, err
}

type hookedLeaseStore struct {
	hookedStore
	spec.LeaseStore
}

func (s hookedLeaseStore) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	cl, err := s.LeaseStore.ClaimRun(ctx, p)
	if err == nil && s.h.afterClaim != nil {
		s.h.afterClaim(ctx, p.RunID)
	}
	return cl, err
}

// withHooks wraps store, keeping its LeaseStore side when it has one.
func withHooks(store spec.RunStateStore, h hooks) spec.RunStateStore {
	hs := hookedStore{store, h}
	if ls, ok := store.(spec.LeaseStore); ok {
		return hookedLeaseStore{hs, ls}
	}
	return hs
}
