package driver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/driver"
)

// cursorRecorder is a store that records the cursors it is given.
type cursorRecorder struct {
	runstate.Store
	got []string
}

func (c *cursorRecorder) ListRuns(_ context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	c.got = append(c.got, p.Cursor)
	return runstate.RunPage{}, nil
}

func (c *cursorRecorder) ListRunnableRuns(_ context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	c.got = append(c.got, p.Cursor)
	return runstate.RunPage{}, nil
}

// A cursor is the store's: the checks in front of a store of its own (a
// plugin in another language, say) pass one of any layout on unchanged,
// and refuse only what cannot be a cursor at all.
func TestCheckedLeavesCursorsToTheStore(t *testing.T) {
	ctx := context.Background()
	inner := &cursorRecorder{Store: memorytest.Open(t, nil)}
	checked, _ := runstate.As[runstate.Store](driver.Checked(inner))
	foreign := "bm9kZXx8c2lnbmVkLWJ5LXRoZS1zdG9yZQ.hmac"
	if _, err := checked.ListRuns(ctx, runstate.ListRunsParams{Cursor: foreign}); err != nil {
		t.Fatalf("ListRuns with the store's own cursor: %v", err)
	}
	if _, err := checked.ListRunnableRuns(ctx, runstate.ListRunnableParams{Cursor: foreign}); err != nil {
		t.Fatalf("ListRunnableRuns with the store's own cursor: %v", err)
	}
	if len(inner.got) != 2 || inner.got[0] != foreign || inner.got[1] != foreign {
		t.Errorf("the store was given %q, want its cursor twice", inner.got)
	}
	for _, bad := range []string{strings.Repeat("c", runstate.MaxCursorLen+1), "\xff\xfe"} {
		if _, err := checked.ListRuns(ctx, runstate.ListRunsParams{Cursor: bad}); !errors.Is(err, runstate.ErrInvalidArgument) {
			t.Errorf("a cursor of %d bytes, valid UTF-8 %v: %v", len(bad), bad != "\xff\xfe", err)
		}
	}
	if len(inner.got) != 2 {
		t.Errorf("a cursor that cannot be one reached the store: %q", inner.got)
	}
}
