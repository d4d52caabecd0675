package protocol

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// An error no status carries (a batch item's) keeps its identity in its
// ErrorDetail: the context's errors and a batch item's index too.
func TestErrorDetailsKeepTheirIdentity(t *testing.T) {
	for _, tc := range []struct {
		sent  error
		is    error
		index int // -1: no *runstate.BatchItemError
	}{
		{fmt.Errorf("store: %w", context.Canceled), context.Canceled, -1},
		{context.DeadlineExceeded, context.DeadlineExceeded, -1},
		{runstate.ErrLeaseLost, runstate.ErrLeaseLost, -1},
		{&runstate.BatchItemError{Index: 0, Err: runstate.InvalidArgument("run_id", "twice")}, runstate.ErrInvalidArgument, 0},
		{&runstate.BatchItemError{Index: 3, Err: fmt.Errorf("run r3: %w", runstate.ErrAlreadyExists)}, runstate.ErrAlreadyExists, 3},
	} {
		got := fromErrorDetail(wire(t, errorDetail(tc.sent), &pb.ErrorDetail{}), "plugin")
		if !errors.Is(got, tc.is) {
			t.Errorf("%v arrived as %v", tc.sent, got)
		}
		var item *runstate.BatchItemError
		if isItem := errors.As(got, &item); isItem != (tc.index >= 0) || isItem && item.Index != tc.index {
			t.Errorf("%v arrived as %v (item %+v)", tc.sent, got, item)
		}
	}
	// As a call's error, a batch item's index crosses in the status too.
	sent := &runstate.BatchItemError{Index: 2, Err: runstate.ErrNotFound}
	got := fromStatus(overTheWire(t, toStatus(sent)), "plugin", func() bool { return false })
	var item *runstate.BatchItemError
	if !errors.As(got, &item) || item.Index != 2 || !errors.Is(got, runstate.ErrNotFound) || got.Error() != sent.Error() {
		t.Errorf("%v arrived as %v", sent, got)
	}
}
