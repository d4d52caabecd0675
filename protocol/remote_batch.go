package protocol

import (
	"context"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// A RemoteStore's batch calls live on types of their own, so that the
// store offered to callers (offered, behind Checked) has exactly the batch
// interfaces the server said its store has: a type assertion on it tells
// the truth, and a caller of runstate.CreateRuns and its kin falls back to
// single calls against a server without them (an older one, say). Go
// composes a method set only by type, hence one struct per combination.

type (
	remoteCreator struct{ r *RemoteStore }
	remoteUpdater struct{ r *RemoteStore }
	remoteClaimer struct{ r *RemoteStore }
)

// runOnly shows only the RunStateStore methods of a store without leases:
// embedding the interface promotes nothing else.
type runOnly struct{ runstate.RunStateStore }

// offered returns r with the interfaces its server offers: runstate.Store
// and runstate.LeaseReader with leases, else runstate.RunStateStore alone;
// and the batch interfaces of Info().Batches (a batch claim only with
// leases).
func (r *RemoteStore) offered() runstate.RunStateStore {
	b := r.info.Batches
	c, u, k := remoteCreator{r}, remoteUpdater{r}, remoteClaimer{r}
	if !r.info.Leases {
		runs := runOnly{r}
		switch {
		case b.CreateRuns && b.UpdateRuns:
			return struct {
				runOnly
				remoteCreator
				remoteUpdater
			}{runs, c, u}
		case b.CreateRuns:
			return struct {
				runOnly
				remoteCreator
			}{runs, c}
		case b.UpdateRuns:
			return struct {
				runOnly
				remoteUpdater
			}{runs, u}
		}
		return runs
	}
	switch {
	case b.CreateRuns && b.UpdateRuns && b.ClaimRuns:
		return struct {
			*RemoteStore
			remoteCreator
			remoteUpdater
			remoteClaimer
		}{r, c, u, k}
	case b.CreateRuns && b.UpdateRuns:
		return struct {
			*RemoteStore
			remoteCreator
			remoteUpdater
		}{r, c, u}
	case b.CreateRuns && b.ClaimRuns:
		return struct {
			*RemoteStore
			remoteCreator
			remoteClaimer
		}{r, c, k}
	case b.UpdateRuns && b.ClaimRuns:
		return struct {
			*RemoteStore
			remoteUpdater
			remoteClaimer
		}{r, u, k}
	case b.CreateRuns:
		return struct {
			*RemoteStore
			remoteCreator
		}{r, c}
	case b.UpdateRuns:
		return struct {
			*RemoteStore
			remoteUpdater
		}{r, u}
	case b.ClaimRuns:
		return struct {
			*RemoteStore
			remoteClaimer
		}{r, k}
	}
	return r
}

// CreateRuns implements runstate.BatchCreator: a refused item's
// *runstate.BatchItemError arrives with its index and its error's identity.
func (c remoteCreator) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	req := &pb.CreateRunsRequest{Runs: make([]*pb.CreateRunRequest, len(p.Runs))}
	for i, run := range p.Runs {
		req.Runs[i] = createPB(run)
	}
	resp, err := call(c.r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.CreateRunsResponse, error) {
		return rpc.CreateRuns(ctx, req)
	})
	if err != nil {
		return runstate.CreateRunsResult{}, err
	}
	out := runstate.CreateRunsResult{Runs: make([]runstate.RunSnapshot, len(resp.Runs))}
	for i, run := range resp.Runs {
		out.Runs[i] = fromRun(run)
	}
	return out, nil
}

// UpdateRuns implements runstate.BatchUpdater: each item's error arrives
// with its identity.
func (u remoteUpdater) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	req := &pb.UpdateRunsRequest{Updates: make([]*pb.UpdateRunRequest, len(p.Updates))}
	for i, update := range p.Updates {
		req.Updates[i] = updatePB(update)
	}
	resp, err := call(u.r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.UpdateRunsResponse, error) {
		return rpc.UpdateRuns(ctx, req)
	})
	if err != nil {
		return runstate.UpdateRunsResult{}, err
	}
	out := runstate.UpdateRunsResult{Items: make([]runstate.UpdateRunsItem, len(resp.Items))}
	for i, item := range resp.Items {
		if item.Error != nil {
			out.Items[i].Err = fromErrorDetail(item.Error, u.r.peer)
		} else {
			out.Items[i].Run = fromRun(item.GetRun())
		}
	}
	return out, nil
}

// ClaimRuns implements runstate.BatchClaimer: the claims made before an
// error arrive with it.
func (k remoteClaimer) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	resp, err := call(k.r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.ClaimRunsResponse, error) {
		return rpc.ClaimRuns(ctx, claimRunsPB(p))
	})
	if err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	var out runstate.ClaimRunsResult
	for _, c := range resp.Claims {
		out.Claims = append(out.Claims, fromClaim(c))
	}
	if resp.Error != nil {
		return out, fromErrorDetail(resp.Error, k.r.peer)
	}
	return out, nil
}
