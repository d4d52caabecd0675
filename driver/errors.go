package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/runstate/runstate"
)

// contractError maps a driver's error to the contract's: the contract's own
// and a context's pass, a not-found gets the kit's words for runID (the run
// the call asked after; "" passes it as it is), anything else is
// ErrUnavailable, with the driver's error as its cause.
func contractError(err error, runID string) error {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case runstate.CodeOf(err) == runstate.CodeNotFound && runID != "":
		return notFound(runID)
	case runstate.CodeOf(err) != "":
		return err
	}
	return runstate.Unavailable("the store failed", err)
}

// contractErrorNotFoundIsFailure maps the error of a driver call that has
// no not-found answer in the contract (Now, Insert, the listings, the claim
// candidate search): there a not-found is the driver failing.
func contractErrorNotFoundIsFailure(err error) error {
	if runstate.CodeOf(err) == runstate.CodeNotFound {
		return runstate.Unavailable("the store failed", err)
	}
	return contractError(err, "")
}

// The contract's errors as the kit words them, one constructor each.

func notFound(runID string) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeNotFound, RunID: runID, Message: fmt.Sprintf("run %s not found", runID)}
}

// nothingRunnable is claim-next's answer when no run matches (LEASE-013).
func nothingRunnable() *runstate.Error {
	return &runstate.Error{Code: runstate.CodeNotFound, Message: "no runnable run matches the filter"}
}

func alreadyExists(runID string) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeAlreadyExists, RunID: runID, Message: fmt.Sprintf("run %s already exists; a retry is a new run with retry_of set", runID)}
}

func versionConflict(runID string, expected, current int64) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeVersionConflict, RunID: runID, ExpectedVersion: expected, CurrentVersion: current,
		Message: fmt.Sprintf("run %s is at version %d, the update expected %d; re-read the run and retry", runID, current, expected)}
}

func invalidTransition(runID string, from, to runstate.RunStatus) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeInvalidTransition, RunID: runID, From: string(from), To: string(to),
		Message: fmt.Sprintf("run %s: transition %s -> %s is not allowed", runID, from, to)}
}

func leaseHeld(runID string) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeLeaseHeld, RunID: runID, Message: fmt.Sprintf("run %s is leased by another owner", runID)}
}

func leaseLost(runID string, token int64, why string) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeLeaseLost, RunID: runID, Message: fmt.Sprintf("run %s: lease token %d is no longer valid: %s", runID, token, why)}
}
