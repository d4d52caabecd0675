package driver

import (
	"fmt"

	"github.com/runstate/runstate"
)

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
