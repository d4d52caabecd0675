package driver

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/runstate/runstate"
)

// Checked returns inner with the kit's front door: every call checks its
// context and validates its input before inner sees it, and an error that
// carries no runstate.Code becomes ErrUnavailable. It is for a store that
// implements the contract's semantics itself, or passes calls on (a plugin
// client, whose far side is a store of its own): bad input gets the typed
// error a Driver-based store gives, without reaching inner. CreateRun and
// UpdateRun pass their input on normalised (a generated run_id, status
// aliases resolved); the other calls pass it on as given.
//
// Its Features are inner's, asked of inner at each call, each behind the
// same door; a feature the door does not know passes through as it is.
// runstate.As[runstate.Store] gives its lease side with it as one store.
func Checked(inner runstate.RunStateStore) runstate.RunStateStore { return checkedRuns{inner} }

type checkedRuns struct{ inner runstate.RunStateStore }

// Features implements runstate.RunStateStore: inner's, behind the checks.
func (c checkedRuns) Features() runstate.Features {
	f := runstate.Resolve(c.inner)
	if f.Leases != nil {
		f.Leases = checkedLeases{f.Leases}
	}
	if f.LeaseReader != nil {
		f.LeaseReader = checkedReader{f.LeaseReader}
	}
	if f.BatchCreator != nil {
		f.BatchCreator = checkedCreator{f.BatchCreator}
	}
	if f.BatchUpdater != nil {
		f.BatchUpdater = checkedUpdater{f.BatchUpdater}
	}
	if f.BatchClaimer != nil {
		f.BatchClaimer = checkedClaimer{f.BatchClaimer}
	}
	return f
}

type checkedLeases struct{ inner runstate.LeaseStore }

type checkedReader struct{ inner runstate.LeaseReader }

type checkedCreator struct{ inner runstate.BatchCreator }

type checkedUpdater struct{ inner runstate.BatchUpdater }

type checkedClaimer struct{ inner runstate.BatchClaimer }

var (
	_ runstate.LeaseStore   = checkedLeases{}
	_ runstate.LeaseReader  = checkedReader{}
	_ runstate.BatchCreator = checkedCreator{}
	_ runstate.BatchUpdater = checkedUpdater{}
	_ runstate.BatchClaimer = checkedClaimer{}
)

// pass calls inner once the input passed its check (inputErr nil) and ctx
// is live.
func pass[T any](ctx context.Context, inputErr error, call func() (T, error)) (T, error) {
	var zero T
	if inputErr != nil {
		return zero, inputErr
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	out, err := call()
	if err != nil {
		return zero, contractError(err, "")
	}
	return out, nil
}

func (c checkedRuns) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	return pass(ctx, prepareCreate(&p), func() (runstate.RunSnapshot, error) { return c.inner.CreateRun(ctx, p) })
}

func (c checkedRuns) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return pass(ctx, prepareUpdate(&p), func() (runstate.RunSnapshot, error) { return c.inner.UpdateRun(ctx, p) })
}

func (c checkedRuns) GetRun(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	return pass(ctx, prepareGet(runID), func() (runstate.RunSnapshot, error) { return c.inner.GetRun(ctx, runID) })
}

func (c checkedRuns) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	err := opaqueCursor(p.Cursor)
	if err == nil {
		withoutCursor := p
		withoutCursor.Cursor = ""
		_, err = prepareListRuns(withoutCursor)
	}
	return pass(ctx, err, func() (runstate.RunPage, error) { return c.inner.ListRuns(ctx, p) })
}

// opaqueCursor checks a cursor as the front door can: the store behind it
// issued it, in a layout of its own, and refuses one it did not (LIST-007);
// what crosses here is text of a bounded length.
func opaqueCursor(cursor string) error {
	if len(cursor) > runstate.MaxCursorLen || !utf8.ValidString(cursor) {
		return badCursor()
	}
	return nil
}

func (c checkedRuns) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	_, err := prepareAuditQuery(p)
	return pass(ctx, err, func() (runstate.AuditPage, error) { return c.inner.ListAuditEvents(ctx, p) })
}

func (c checkedLeases) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	_, err := prepareClaimRun(p)
	return pass(ctx, err, func() (runstate.Claim, error) { return c.inner.ClaimRun(ctx, p) })
}

func (c checkedLeases) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	_, _, err := prepareClaimNext(p)
	return pass(ctx, err, func() (runstate.Claim, error) { return c.inner.ClaimNextRun(ctx, p) })
}

func (c checkedLeases) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	return pass(ctx, prepareRenew(p), func() (runstate.Lease, error) { return c.inner.RenewLease(ctx, p) })
}

func (c checkedLeases) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	_, err := pass(ctx, prepareRelease(p), func() (struct{}, error) { return struct{}{}, c.inner.ReleaseLease(ctx, p) })
	return err
}

func (c checkedLeases) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	err := opaqueCursor(p.Cursor)
	if err == nil {
		_, err = prepareRunnable(p.Filter, p.Limit, "")
	}
	return pass(ctx, err, func() (runstate.RunPage, error) { return c.inner.ListRunnableRuns(ctx, p) })
}

func (c checkedReader) GetLease(ctx context.Context, runID string) (runstate.Lease, error) {
	return pass(ctx, prepareGet(runID), func() (runstate.Lease, error) { return c.inner.GetLease(ctx, runID) })
}

func (c checkedCreator) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	items, err := prepareCreateRuns(p)
	return pass(ctx, err, func() (runstate.CreateRunsResult, error) {
		return c.inner.CreateRuns(ctx, runstate.CreateRunsParams{Runs: items})
	})
}

// UpdateRuns answers the updates that fail their check itself and passes
// the others on.
func (c checkedUpdater) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	updates, out, err := prepareUpdateRuns(p)
	var valid []runstate.UpdateRunParams
	var at []int
	for i, u := range updates {
		if err == nil && out.Items[i].Err == nil {
			valid, at = append(valid, u), append(at, i)
		}
	}
	if err == nil && len(valid) == 0 {
		return out, nil
	}
	inner, err := pass(ctx, err, func() (runstate.UpdateRunsResult, error) {
		return c.inner.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: valid})
	})
	if err != nil {
		return runstate.UpdateRunsResult{}, err
	}
	if len(inner.Items) != len(valid) {
		return runstate.UpdateRunsResult{}, runstate.Unavailable(fmt.Sprintf("update-runs: the store answered %d items for %d updates", len(inner.Items), len(valid)), nil)
	}
	for k, item := range inner.Items {
		item.Err = contractError(item.Err, "")
		out.Items[at[k]] = item
	}
	return out, nil
}

func (c checkedClaimer) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	if _, _, _, err := prepareClaimRuns(p); err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	// Claims made before an error are held: they are the caller's.
	out, err := c.inner.ClaimRuns(ctx, p)
	return out, contractError(err, "")
}
