package conformance

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("LIST-001", "ListRuns with statuses returns exactly the runs in those statuses.", none, checkListByStatus)
	register("LIST-002", "ListRuns with a workflow name returns exactly that workflow's runs.", none, checkListByWorkflow)
	register("LIST-003", "ListRuns with labels returns exactly the runs carrying every given pair.", none, checkListByLabels)
	register("LIST-004", "ListRuns with a created range returns exactly the runs created in [from, before).", none, checkListByCreated)
	register("LIST-005", "ListRuns orders by created_at then run_id and pages without skips or repeats; the last page has no cursor.", none, checkListPaging)
	register("LIST-006", "Paging ListRuns while runs are being created neither skips nor repeats any run.", none, checkListPagingUnderInserts)
	register("LIST-007", "Filters combine with AND; a cursor the store did not issue, or a limit out of range, is INVALID_ARGUMENT.", none, checkListCombinedAndInvalid)
}

// listAll pages through ListRuns and returns the run_ids in order.
func (c *checkState) listAll(p runstate.ListRunsParams) []string {
	var ids []string
	for pages := 0; ; pages++ {
		page, err := c.store.ListRuns(c.ctx, p)
		if err != nil {
			c.Fatalf("ListRuns to succeed", "%s for %s", describeErr(err), jsonOf(p))
		}
		if pages > 10_000 {
			c.Fatalf("paging to end", "more than 10000 pages")
		}
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
		}
		if page.NextCursor == "" {
			return ids
		}
		p.Cursor = page.NextCursor
	}
}

// expectIDs compares listed ids with the expected set, ignoring order.
func (c *checkState) expectIDs(what string, got, want []string) {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		c.Errorf(fmt.Sprintf("%s to list %v", what, w), "%v", g)
	}
}

func checkListByStatus(c *checkState) {
	byStatus := map[runstate.RunStatus][]string{}
	for _, st := range runstate.RunStatuses() {
		for range 2 {
			byStatus[st] = append(byStatus[st], c.runIn(st, runstate.CreateRunParams{}).RunID)
		}
	}
	for _, set := range [][]runstate.RunStatus{{runstate.StatusRunning}, {runstate.StatusQueued, runstate.StatusWaiting}, {runstate.StatusFailed, runstate.StatusInterrupted, runstate.StatusSuccess}, runstate.RunStatuses()} {
		var names []string
		var want []string
		for _, st := range set {
			names = append(names, string(st))
			want = append(want, byStatus[st]...)
		}
		c.expectIDs(fmt.Sprintf("statuses %v", names), c.listAll(runstate.ListRunsParams{Statuses: names}), want)
	}
}

func checkListByWorkflow(c *checkState) {
	var deploys []string
	// Near misses: a prefix, a suffix, another case, an extension.
	for _, wf := range []string{"deploy", "build", "deploy", "deplo", "pre-deploy", "Deploy", "deploy-prod", "deploy", "deploy "} {
		run := c.create(runstate.CreateRunParams{WorkflowName: wf})
		if wf == "deploy" {
			deploys = append(deploys, run.RunID)
		}
	}
	c.expectIDs("workflow deploy (exactly)", c.listAll(runstate.ListRunsParams{WorkflowName: "deploy"}), deploys)
	c.expectIDs("workflow nothing", c.listAll(runstate.ListRunsParams{WorkflowName: "nothing"}), nil)
	c.expectIDs("workflow dep", c.listAll(runstate.ListRunsParams{WorkflowName: "dep"}), nil)
}

func checkListByLabels(c *checkState) {
	a := c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "prod", "team": "web"}}).RunID
	b := c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "prod", "team": "db"}}).RunID
	c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "dev", "team": "web"}})
	c.create(runstate.CreateRunParams{})
	c.expectIDs("labels env=prod", c.listAll(runstate.ListRunsParams{Labels: map[string]string{"env": "prod"}}), []string{a, b})
	c.expectIDs("labels env=prod,team=web", c.listAll(runstate.ListRunsParams{Labels: map[string]string{"env": "prod", "team": "web"}}), []string{a})
	c.expectIDs("labels env=staging", c.listAll(runstate.ListRunsParams{Labels: map[string]string{"env": "staging"}}), nil)
	// Near misses of key and value: a prefix, an extension, another case.
	c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "production", "team": "web"}})
	c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "pro", "team": "web"}})
	c.create(runstate.CreateRunParams{Labels: map[string]string{"Env": "prod", "team": "web"}})
	c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "Prod", "team": "web"}})
	c.create(runstate.CreateRunParams{Labels: map[string]string{"environment": "prod", "team": "web"}})
	c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "prod ", "team": "web"}})
	c.expectIDs("labels env=prod among near misses", c.listAll(runstate.ListRunsParams{Labels: map[string]string{"env": "prod"}}), []string{a, b})
	c.expectIDs("labels env=prod,team=web among near misses", c.listAll(runstate.ListRunsParams{Labels: map[string]string{"env": "prod", "team": "web"}}), []string{a})
}

func checkListByCreated(c *checkState) {
	var runs []runstate.RunSnapshot
	for range 5 {
		runs = append(runs, c.newRun())
		c.pass(3 * time.Millisecond)
	}
	ids := func(rs []runstate.RunSnapshot) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.RunID)
		}
		return out
	}
	from, before := runs[1].CreatedAt, runs[4].CreatedAt
	c.expectIDs("created in [run2, run5)", c.listAll(runstate.ListRunsParams{CreatedFrom: from, CreatedBefore: before}), ids(runs[1:4]))
	c.expectIDs("created from run4", c.listAll(runstate.ListRunsParams{CreatedFrom: runs[3].CreatedAt}), ids(runs[3:]))
	c.expectIDs("created before run2", c.listAll(runstate.ListRunsParams{CreatedBefore: runs[1].CreatedAt}), ids(runs[:1]))
}

func checkListPaging(c *checkState) {
	var want []runstate.RunSnapshot
	for i := range 23 {
		want = append(want, c.create(runstate.CreateRunParams{RunID: fmt.Sprintf("page-%02d", (i*7)%23)}))
		// Runs that share a created_at, and runs less than a millisecond
		// apart: an index that keeps created_at to the millisecond orders
		// these by run_id alone.
		switch i % 5 {
		case 0:
			c.pass(time.Millisecond)
		case 2:
			c.pass(300 * time.Microsecond)
		}
	}
	// Runs created in one batch share a created_at where the store stamps
	// a batch once, also on a real clock: a cursor that resumes after the
	// last run's created_at, not after its (created_at, run_id), skips them.
	if b, ok := runstate.As[runstate.BatchCreator](c.store); ok {
		var items []runstate.CreateRunParams
		for i := range 7 {
			items = append(items, runstate.CreateRunParams{RunID: fmt.Sprintf("batch-%02d", (i*3)%7), WorkflowName: workflow})
		}
		res, err := b.CreateRuns(c.ctx, runstate.CreateRunsParams{Runs: items})
		if err != nil {
			c.Fatalf("CreateRuns to succeed", "%s", describeErr(err))
		}
		want = append(want, res.Runs...)
	}
	// ListRuns order: created_at, then run_id (LIST-005).
	slices.SortFunc(want, func(a, b runstate.RunSnapshot) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.RunID, b.RunID))
	})
	var wantIDs []string
	for _, r := range want {
		wantIDs = append(wantIDs, r.RunID)
	}
	for _, limit := range []int{1, 2, 5, 23, runstate.MaxPageLimit} {
		got := c.listAll(runstate.ListRunsParams{Limit: limit})
		if !slices.Equal(got, wantIDs) {
			c.Errorf(fmt.Sprintf("pages of %d to list every run once in (created_at, run_id) order %v", limit, wantIDs), "%v", got)
		}
	}
	page, err := c.store.ListRuns(c.ctx, runstate.ListRunsParams{Limit: len(want)})
	if err != nil || len(page.Runs) != len(want) || page.NextCursor != "" {
		c.Errorf("a page holding the last run to have no cursor", "%d runs, cursor %q, %s", len(page.Runs), page.NextCursor, describeErr(err))
	}
}

func checkListPagingUnderInserts(c *checkState) {
	var existing []string
	for range 60 {
		existing = append(existing, c.newRun().RunID)
	}
	stores := c.handles(2)
	var stop atomic.Bool
	var got []string
	c.parallel(2, func(i int) {
		if i == 0 {
			got = c.listAll(runstate.ListRunsParams{Limit: 7})
			stop.Store(true)
			return
		}
		// Bounded: under a stopped clock new runs sort after every cursor,
		// and unbounded inserts would keep the listing from ever ending.
		for n := 0; n < 400 && !stop.Load(); n++ {
			if _, err := stores[1].CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: workflow}); err != nil {
				c.Errorf("concurrent creates to succeed", "%s", describeErr(err))
				return
			}
		}
	})
	c.expectOncePerRun("while another handle creates runs", got, existing)
	if !c.target.Capabilities.ControlledClock {
		return
	}
	// With the clock stopped, runs created between pages sort before the
	// cursor or after it by run_id alone (same created_at): a store that
	// pages by offset, in either direction, shifts its pages and repeats or
	// skips runs.
	c.pass(time.Second) // past the runs above: the range below holds only these
	var before []string
	for i := range 20 {
		id := fmt.Sprintf("m%02d", i)
		before = append(before, c.create(runstate.CreateRunParams{RunID: id}).RunID)
	}
	p := runstate.ListRunsParams{Limit: 5, CreatedFrom: c.get(before[0]).CreatedAt}
	var listed []string
	for n := 0; ; n++ {
		page, err := c.store.ListRuns(c.ctx, p)
		if err != nil {
			c.Fatalf("ListRuns to succeed", "%s", describeErr(err))
		}
		for _, r := range page.Runs {
			listed = append(listed, r.RunID)
		}
		if page.NextCursor == "" || n > 50 {
			break
		}
		for j := range 3 { // runs that sort before every run listed so far, and after every one
			c.create(runstate.CreateRunParams{RunID: fmt.Sprintf("a%02d-%d", n, j)})
			c.create(runstate.CreateRunParams{RunID: fmt.Sprintf("z%02d-%d", n, j)})
		}
		p.Cursor = page.NextCursor
	}
	var kept []string
	for _, id := range listed {
		if strings.HasPrefix(id, "m") {
			kept = append(kept, id)
		}
	}
	c.expectOncePerRun("while runs that sort before the cursor are created", kept, before)
}

// expectOncePerRun checks that got lists every run of want exactly once.
func (c *checkState) expectOncePerRun(while string, got, want []string) {
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
		if seen[id] == 2 {
			c.Errorf("no run listed twice "+while, "%s repeated", id)
		}
	}
	for _, id := range want {
		if seen[id] == 0 {
			c.Errorf("every run that existed before paging began to be listed "+while, "%s skipped", id)
		}
	}
}

func checkListCombinedAndInvalid(c *checkState) {
	want := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{WorkflowName: "deploy", Labels: map[string]string{"env": "prod"}}).RunID
	c.runIn(runstate.StatusRunning, runstate.CreateRunParams{WorkflowName: "deploy", Labels: map[string]string{"env": "dev"}})
	c.create(runstate.CreateRunParams{WorkflowName: "deploy", Labels: map[string]string{"env": "prod"}})
	c.runIn(runstate.StatusRunning, runstate.CreateRunParams{WorkflowName: "build", Labels: map[string]string{"env": "prod"}})
	c.expectIDs("running deploy runs with env=prod", c.listAll(runstate.ListRunsParams{Statuses: []string{"running"},
		WorkflowName: "deploy", Labels: map[string]string{"env": "prod"}}), []string{want})

	for name, p := range map[string]runstate.ListRunsParams{
		"a made-up cursor":    {Cursor: "bm90LWEtY3Vyc29y"},
		"a non-base64 cursor": {Cursor: "%%%"},
		"a negative limit":    {Limit: -1},
		"a limit over 1000":   {Limit: runstate.MaxPageLimit + 1},
		"an empty range":      {CreatedFrom: time.Unix(100, 0), CreatedBefore: time.Unix(100, 0)},
		"a reversed range":    {CreatedFrom: time.Unix(200, 0), CreatedBefore: time.Unix(100, 0)},
	} {
		_, err := c.store.ListRuns(c.ctx, p)
		c.expectInvalid(err, "ListRuns with "+name)
	}
	for name, p := range map[string]runstate.ListAuditParams{
		"a negative after_seq": {RunID: want, AfterSeq: -1},
		"a negative limit":     {RunID: want, Limit: -1},
		"a limit over 1000":    {RunID: want, Limit: runstate.MaxPageLimit + 1},
	} {
		_, err := c.store.ListAuditEvents(c.ctx, p)
		c.expectInvalid(err, "ListAuditEvents with "+name)
	}
	// The largest page size is in range, in every listing.
	if _, err := c.store.ListRuns(c.ctx, runstate.ListRunsParams{Limit: runstate.MaxPageLimit}); err != nil {
		c.Errorf(fmt.Sprintf("ListRuns with a limit of %d, the maximum, to succeed", runstate.MaxPageLimit), "%s", describeErr(err))
	}
	if _, err := c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: want, Limit: runstate.MaxPageLimit}); err != nil {
		c.Errorf(fmt.Sprintf("ListAuditEvents with a limit of %d, the maximum, to succeed", runstate.MaxPageLimit), "%s", describeErr(err))
	}
	if !c.target.Capabilities.Leases {
		return
	}
	// The two listings' cursors are not interchangeable.
	for range 3 {
		c.newRun()
	}
	runsPage, err := c.store.ListRuns(c.ctx, runstate.ListRunsParams{Limit: 1})
	if err != nil || runsPage.NextCursor == "" {
		c.Fatalf("a first page of ListRuns with a cursor", "%s %s", jsonOf(runsPage), describeErr(err))
	}
	runnablePage, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Limit: 1})
	if err != nil || runnablePage.NextCursor == "" {
		c.Fatalf("a first page of the runnable listing with a cursor", "%s %s", jsonOf(runnablePage), describeErr(err))
	}
	_, err = c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Cursor: runsPage.NextCursor})
	c.expectInvalid(err, "the runnable listing with a ListRuns cursor")
	_, err = c.store.ListRuns(c.ctx, runstate.ListRunsParams{Cursor: runnablePage.NextCursor})
	c.expectInvalid(err, "ListRuns with a runnable-listing cursor")
	for name, p := range map[string]runstate.ListRunnableParams{"a made-up cursor": {Cursor: "bm90LWEtY3Vyc29y"}, "a limit over 1000": {Limit: runstate.MaxPageLimit + 1}} {
		_, err := c.leases().ListRunnableRuns(c.ctx, p)
		c.expectInvalid(err, "the runnable listing with "+name)
	}
	if _, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Limit: runstate.MaxPageLimit}); err != nil {
		c.Errorf(fmt.Sprintf("the runnable listing with a limit of %d, the maximum, to succeed", runstate.MaxPageLimit), "%s", describeErr(err))
	}
}
