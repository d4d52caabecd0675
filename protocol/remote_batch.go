package protocol

import (
	"context"
	"fmt"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// A RemoteStore's batch calls live on types of their own, which its
// Features hand out exactly when the server said its store has them: a
// caller of runstate.CreateRuns and its kin falls back to single calls
// against a server without them (an older one, say).
type (
	remoteCreator struct{ r *RemoteStore }
	remoteUpdater struct{ r *RemoteStore }
	remoteClaimer struct{ r *RemoteStore }
)

// Features implements runstate.RunStateStore: the features the server
// named when opened (Info().Features), no others.
func (r *RemoteStore) Features() runstate.Features {
	var f runstate.Features
	for _, sf := range storeFeatures {
		if r.info.Has(sf.name) {
			sf.set(&f, r)
		}
	}
	return f
}

// CreateRuns implements runstate.BatchCreator: a refused item's
// *runstate.BatchItemError arrives with its index and its error's identity.
func (c remoteCreator) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	req := &pb.CreateRunsRequest{Runs: make([]*pb.CreateRunRequest, len(p.Runs))}
	for i, run := range p.Runs {
		if err := c.r.principal(&run.Actor); err != nil {
			return runstate.CreateRunsResult{}, &runstate.BatchItemError{Index: i, Err: err}
		}
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
// with its identity. An item the client refuses (a principal its server
// would drop) is refused on its own, as the store refuses an item, and
// the others go. To a server that cannot release a lease in an update's
// write, each applied item with ReleaseLease is followed by its
// ReleaseLease call, whose failure is the item's (UpdateRun says more).
func (u remoteUpdater) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	out := runstate.UpdateRunsResult{Items: make([]runstate.UpdateRunsItem, len(p.Updates))}
	req := &pb.UpdateRunsRequest{}
	var sent []int                             // the item of each update sent
	var releases []func(context.Context) error // and its release after it
	for i, update := range p.Updates {
		if err := u.r.principal(&update.Actor); err != nil {
			out.Items[i].Err = err
			continue
		}
		if err := u.r.wakeAt(update); err != nil {
			out.Items[i].Err = err
			continue
		}
		releases = append(releases, u.r.releaseAfter(&update))
		req.Updates = append(req.Updates, updatePB(update))
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out, nil
	}
	resp, err := call(u.r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.UpdateRunsResponse, error) {
		return rpc.UpdateRuns(ctx, req)
	})
	if err != nil {
		return runstate.UpdateRunsResult{}, err
	}
	if len(resp.Items) != len(sent) {
		return runstate.UpdateRunsResult{}, runstate.Unavailable(fmt.Sprintf("%s answered %d items for %d updates", u.r.peer, len(resp.Items), len(sent)), nil)
	}
	for k, item := range resp.Items {
		i := sent[k]
		if item.Error != nil {
			out.Items[i].Err = fromErrorDetail(item.Error, u.r.peer)
			continue
		}
		out.Items[i].Run = fromRun(item.GetRun())
		out.Items[i].Err = releases[k](ctx)
	}
	return out, nil
}

// ClaimRuns implements runstate.BatchClaimer: the claims made before an
// error arrive with it. A server that cannot start the runs in the claim's
// write (FeatureBatchClaimStart) is asked as runstate.ClaimRuns asks a
// store without batch claims: one claim, then one start, per run.
func (k remoteClaimer) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	if !p.Start {
		// Actor and reason are the start's: without one they mean nothing,
		// and are not sent.
		p.Actor, p.Reason = runstate.Actor{}, ""
	}
	if err := k.r.principal(&p.Actor); err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	if p.Start && !k.r.info.Has(FeatureBatchClaimStart) {
		return runstate.ClaimRuns(ctx, oneClaimAtATime{k.r}, p)
	}
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
