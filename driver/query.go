package driver

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runstate/runstate"
)

// RunFilter is a validated ListRuns filter.
type RunFilter struct {
	Statuses                   []runstate.RunStatus
	WorkflowName               string
	Labels                     map[string]string
	CreatedFrom, CreatedBefore time.Time
}

// Matches reports whether s passes every part of the filter, combined with
// AND (LIST-007): statuses (LIST-001), workflow name (LIST-002), created
// range [from, before) (LIST-004) and every label pair (LIST-003).
func (f RunFilter) Matches(s runstate.RunSnapshot) bool {
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, s.Status) {
		return false
	}
	if f.WorkflowName != "" && s.WorkflowName != f.WorkflowName {
		return false
	}
	if !f.CreatedFrom.IsZero() && s.CreatedAt.Before(f.CreatedFrom) {
		return false
	}
	if !f.CreatedBefore.IsZero() && !s.CreatedAt.Before(f.CreatedBefore) {
		return false
	}
	return labelsMatch(s.Labels, f.Labels)
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// RunPosition is a run's place in ListRuns order: created_at, then run_id (LIST-005).
type RunPosition struct {
	CreatedAt time.Time
	RunID     string
}

// PositionOf returns s's place in ListRuns order.
func PositionOf(s runstate.RunSnapshot) RunPosition { return RunPosition{s.CreatedAt, s.RunID} }

// Compare returns -1, 0 or +1 as p comes before, at or after q.
func (p RunPosition) Compare(q RunPosition) int {
	if c := p.CreatedAt.Compare(q.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(p.RunID, q.RunID)
}

// Less reports whether p comes before q.
func (p RunPosition) Less(q RunPosition) bool { return p.Compare(q) < 0 }

// RunQuery is a validated ListRuns request.
type RunQuery struct {
	Filter RunFilter
	Limit  int
	// After, when non-nil, starts the page after this position: keyset
	// paging, so runs created meanwhile cause no skips or repeats (LIST-006).
	After *RunPosition
}

// prepareListRuns validates p: an empty created range, a page size out of
// range or a cursor no ListRuns issued is ErrInvalidArgument (LIST-007).
func prepareListRuns(p runstate.ListRunsParams) (RunQuery, error) {
	var q RunQuery
	var err error
	if q.Filter.Statuses, err = parseStatuses("statuses", p.Statuses, nil, false); err != nil {
		return q, err
	}
	if err := validateSelection(p.WorkflowName, p.Labels); err != nil {
		return q, err
	}
	q.Filter.WorkflowName, q.Filter.Labels = p.WorkflowName, p.Labels
	// Stored times are whole microseconds, so bounds rounded up to one
	// select the same runs, and every store compares alike.
	q.Filter.CreatedFrom, q.Filter.CreatedBefore = ceilMicrosecond(p.CreatedFrom), ceilMicrosecond(p.CreatedBefore)
	if !p.CreatedFrom.IsZero() && !p.CreatedBefore.IsZero() && !p.CreatedFrom.Before(p.CreatedBefore) {
		return q, runstate.InvalidArgument("created range", "created_from %v is not before created_before %v", p.CreatedFrom, p.CreatedBefore)
	}
	if q.Limit, err = pageLimit(p.Limit); err != nil {
		return q, err
	}
	if p.Cursor != "" {
		f, err := decodeCursor(p.Cursor, cursorRuns, 2)
		if err != nil {
			return q, err
		}
		created, err := parseMicros(f[0])
		if err != nil {
			return q, badCursor()
		}
		q.After = &RunPosition{CreatedAt: created, RunID: f[1]}
		if q.After.cursor() != p.Cursor {
			return q, badCursor() // another spelling of a position: not one a listing returned
		}
	}
	return q, nil
}

// cursor returns the cursor that continues after p.
func (p RunPosition) cursor() string {
	return encodeCursor(cursorRuns, strconv.FormatInt(p.CreatedAt.UnixMicro(), 10), p.RunID)
}

// RunnablePosition is a run's place in claim order: priority descending,
// then created_at and run_id ascending (LEASE-003).
type RunnablePosition struct {
	Priority  int
	CreatedAt time.Time
	RunID     string
}

// RunnablePositionOf returns s's place in claim order.
func RunnablePositionOf(s runstate.RunSnapshot) RunnablePosition {
	return RunnablePosition{s.Priority, s.CreatedAt, s.RunID}
}

// Compare returns -1, 0 or +1 as p is claimed before, with or after q.
func (p RunnablePosition) Compare(q RunnablePosition) int {
	if p.Priority != q.Priority {
		if p.Priority > q.Priority {
			return -1
		}
		return 1
	}
	return RunPosition{p.CreatedAt, p.RunID}.Compare(RunPosition{q.CreatedAt, q.RunID})
}

// Less reports whether p is claimed before q.
func (p RunnablePosition) Less(q RunnablePosition) bool { return p.Compare(q) < 0 }

// cursor returns the cursor that continues after p.
func (p RunnablePosition) cursor() string {
	return encodeCursor(cursorRunnable, strconv.Itoa(p.Priority), strconv.FormatInt(p.CreatedAt.UnixMicro(), 10), p.RunID)
}

// RunnableQuery is a validated runnable filter with paging.
type RunnableQuery struct {
	Statuses     []runstate.RunStatus
	WorkflowName string
	Labels       map[string]string
	Limit        int
	After        *RunnablePosition
	// Claimant is the worker of a claim-next, nil for a listing.
	Claimant *runstate.Owner
}

// Admits reports whether the run s with lease is one q selects at now: it
// matches q, is not parked past now (WAKE-001) and no live lease holds it
// (LEASE-010), where a lease of an
// earlier incarnation of the Claimant's worker does not count (LEASE-012).
func (q RunnableQuery) Admits(s runstate.RunSnapshot, lease LeaseState, now time.Time) bool {
	if s.WakeAt.After(now) { // parked until then (WAKE-001)
		return false
	}
	if q.Claimant != nil {
		return q.matches(s) && !lease.BlocksClaim(*q.Claimant, now)
	}
	return q.matches(s) && !lease.Live(now)
}

// FirstClaimable returns the index of the candidate that q admits at the
// candidate's own Now and that comes first in claim order, or -1 when q
// admits none. A store whose ClaimNext reads candidates from several
// indexes at once picks the one to claim with it.
func (q RunnableQuery) FirstClaimable(candidates []Current) int {
	best := -1
	for i, c := range candidates {
		if !q.Admits(c.Run, c.Lease, c.Now) {
			continue
		}
		if best < 0 || RunnablePositionOf(c.Run).Less(RunnablePositionOf(candidates[best].Run)) {
			best = i
		}
	}
	return best
}

// matches passes terminal runs by (LEASE-008), and selects by every label
// pair, as ListRuns does (LIST-003): the runnable listing and claims alike
// (LEASE-023).
func (q RunnableQuery) matches(s runstate.RunSnapshot) bool {
	return !s.Status.Terminal() && slices.Contains(q.Statuses, s.Status) &&
		(q.WorkflowName == "" || q.WorkflowName == s.WorkflowName) && labelsMatch(s.Labels, q.Labels)
}

// prepareRunnable validates a runnable filter; limit and cursor are optional.
// Statuses default to queued and waiting (LEASE-011); a terminal one is
// ErrInvalidArgument (LEASE-010), as is a cursor it did not issue (LIST-007).
func prepareRunnable(f runstate.RunnableFilter, limit int, cursor string) (RunnableQuery, error) {
	var q RunnableQuery
	var err error
	if q.Statuses, err = parseStatuses("statuses", f.Statuses, defaultRunnableStatuses(), true); err != nil {
		return q, err
	}
	if err := validateSelection(f.WorkflowName, f.Labels); err != nil {
		return q, err
	}
	q.WorkflowName, q.Labels = f.WorkflowName, f.Labels
	if q.Limit, err = pageLimit(limit); err != nil {
		return q, err
	}
	if cursor != "" {
		parts, err := decodeCursor(cursor, cursorRunnable, 3)
		if err != nil {
			return q, err
		}
		prio, err1 := strconv.Atoi(parts[0])
		created, err2 := parseMicros(parts[1])
		if err1 != nil || err2 != nil {
			return q, badCursor()
		}
		q.After = &RunnablePosition{Priority: prio, CreatedAt: created, RunID: parts[2]}
		if q.After.cursor() != cursor {
			return q, badCursor()
		}
	}
	return q, nil
}

const (
	cursorRuns     = "runs.v1"
	cursorRunnable = "runnable.v1"
)

func encodeCursor(kind string, fields ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "|" + strings.Join(fields, "|")))
}

func decodeCursor(c, kind string, n int) ([]string, error) {
	if len(c) > runstate.MaxCursorLen {
		return nil, badCursor()
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, badCursor()
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != n+1 || parts[0] != kind {
		return nil, badCursor()
	}
	if validateRunID(parts[n]) != nil {
		return nil, badCursor()
	}
	return parts[1:], nil
}

func parseMicros(s string) (time.Time, error) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time: %w", err)
	}
	return time.UnixMicro(us).UTC(), nil
}

func badCursor() error {
	return runstate.InvalidArgument("cursor", "is not a cursor this listing returned; pass NextCursor back unchanged, with the same filters")
}

// validateSelection checks the workflow name (when set) and labels a
// listing selects by.
func validateSelection(workflow string, labels map[string]string) error {
	if workflow != "" {
		if err := validateText("workflow_name", workflow, runstate.MaxWorkflowNameLen, true); err != nil {
			return err
		}
	}
	return validateLabels("labels", labels)
}

// ceilMicrosecond rounds t up to a whole microsecond, in UTC; zero stays zero.
func ceilMicrosecond(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	if c := Timestamp(t); c.Before(t) {
		return c.Add(time.Microsecond)
	}
	return Timestamp(t)
}
