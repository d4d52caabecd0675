package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/testsupport/testlog"
	"github.com/runstate/runstate/tracker"
)

// The console's tests drive a real headless Chromium (Debian's chromium
// package; .ci/run installs it) against serve on a Badger store.

// chromiumPath finds the browser: $RUNSTATE_CHROMIUM, else chromium on PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RUNSTATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH: the console's browser tests need it (apt-get install chromium; .ci/run does)")
	}
	t.Skip("no chromium on PATH: install it (apt-get install chromium) or set RUNSTATE_CHROMIUM to run the console's browser tests")
	return ""
}

// browser starts a fresh headless Chromium, with a profile of its own and
// nothing that reaches out to the network by itself.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// A container's small /dev/shm would crash the renderer.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// consoleServer is serve on a Badger store in a temporary directory, in
// this process, with the test principals' tokens.
type consoleServer struct {
	a     *app
	url   string
	store string // the --store of demo-runner processes that share it
	dir   string
	log   *testlog.Buffer
}

func startConsole(t *testing.T, liveEvery time.Duration) *consoleServer {
	t.Helper()
	return startConsoleWith(t, serveOptions{liveEvery: liveEvery})
}

// startConsoleWith is startConsole with serve's options; it sets the
// address and the tokens file.
func startConsoleWith(t *testing.T, o serveOptions) *consoleServer {
	t.Helper()
	dir := t.TempDir()
	g := globals{storeName: "badger:" + filepath.Join(dir, "store"), dataDir: dir, policy: "interrupt", logLevel: "info",
		lease: 30 * time.Second, notifyAttempts: 1, pluginConfig: kvFlag{}, workerID: "console-test"}
	if err := g.check(); err != nil {
		t.Fatal(err)
	}
	log := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := start(ctx, g, holds(), io.Discard, log)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr, o.tokensFile = lis.Addr().String(), writeTokens(t, dir)
	served := make(chan error, 1)
	go func() { served <- a.serveListener(ctx, o, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.close()
		if t.Failed() {
			t.Logf("serve's log:\n%s", log)
		}
	})
	return &consoleServer{a: a, url: "http://" + lis.Addr().String(), store: g.storeName, dir: dir, log: log}
}

// global are the flags of a demo-runner process on the console's store.
func (c *consoleServer) global() []string {
	return []string{"--data-dir", c.dir, "--store", c.store}
}

// signIn opens the console and signs in with token.
func signIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`.signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#runs")))
}

// do runs browser actions, failing the test with what was being done.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	get(t, ctx, what, chromedp.Steps(steps...))
}

// get runs a browser action and returns its value, failing the test with
// what was being done and what the page said.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	v, err := chromedp.Run(actx, a)
	if err != nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, _ := chromedp.Run(pctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\nthe page says: %s", what, err, page)
	}
	return v
}

// until waits for a JavaScript condition on the page, within 30s.
func until(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	get(t, ctx, what, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// goTo moves the console to a view (a fragment of its address) the way
// a link does, without loading the page again.
func goTo(fragment string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.hash = %q, undefined", fragment))
}

// statusIs is the condition that the run page shows status.
func statusIs(status string) string {
	return fmt.Sprintf(`document.querySelector("#run-status")?.textContent === %q`, status)
}

// screenshot writes the viewport as PNG into $RUNSTATE_CONSOLE_SCREENSHOTS (the
// docs/ folder, to renew docs/demo-runner.md's pictures), if it is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("RUNSTATE_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot", chromedp.CaptureScreenshot())
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

const operatorToken, readerToken = "token-of-olivia-the-operator", "token-of-rita-the-reader"

// Submit a workflow, watch its page go queued, running, waiting without a
// reload, signal it from the page and watch it finish.
func TestConsoleFollowsARunLiveAndSignalsIt(t *testing.T) {
	ctx := browser(t)
	srv := startConsole(t, 100*time.Millisecond)
	wf := writeWorkflow(t, `name: approval
steps:
  - name: build
    type: shell
    hosts: [web-1, web-2]
    command: echo built on $RUNSTATE_HOST; sleep 1.5
  - name: approve
    type: wait
    timeout: 1h
  - name: ship
    type: shell
    command: echo shipped
`)
	out, errOut, code := demo(t, append(srv.global(), "submit", "--label", "team=web", wf)...)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, errOut)
	}
	id := strings.TrimSpace(out)
	signIn(t, ctx, srv.url, operatorToken)
	do(t, ctx, "open the run", chromedp.Click(chromedp.CSS(`a[href="#/runs/`+id+`"]`)))
	until(t, ctx, "the run shows queued", statusIs("queued"))
	// A reload would lose this mark.
	do(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.sameDocument = true, undefined`))

	startDemo(t, append(srv.global(), "--worker-id", "console-worker", "worker", "--slots", "1", "--poll", "100ms")...)
	until(t, ctx, "the run shows running", statusIs("running"))
	until(t, ctx, "the run shows waiting", statusIs("waiting"))
	until(t, ctx, "the output and the lease show", `document.querySelector("#steps").textContent.includes("built on web-2") &&
		document.querySelector("main").textContent.includes("console-worker")`)
	// Parked: the worker's one slot is free, and a run submitted now
	// finishes while this one waits.
	until(t, ctx, "the run shows parked", `(document.querySelector("#parked-until") || {}).textContent?.includes("no worker holds it")`)
	quick := writeWorkflow(t, "name: quick\nsteps:\n  - name: only\n    type: shell\n    command: echo quick\n")
	out, errOut, code = demo(t, append(srv.global(), "submit", quick)...)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, errOut)
	}
	next := strings.TrimSpace(out)
	for deadline := time.Now().Add(time.Minute); runStatus(t, srv.global(), next).Status != runstate.StatusSuccess; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run submitted while the approval waits is %s", runStatus(t, srv.global(), next).Status)
		}
	}
	until(t, ctx, "the approval still shows waiting, parked", statusIs("waiting")+` && document.querySelector("#parked-until") !== null`)
	screenshot(t, ctx, "console-run.png")

	do(t, ctx, "signal it",
		chromedp.Click(chromedp.CSS("#action-signal")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm-ok")))
	until(t, ctx, "the run shows success", statusIs("success"))
	until(t, ctx, "the trail shows the resume by the signal's operator", `document.querySelector("#audit").textContent.includes("olivia")`)
	until(t, ctx, "the run no longer shows parked", `document.querySelector("#parked-until") === null`)
	if !get(t, ctx, "check the page was not reloaded", chromedp.Evaluate[bool](`window.sameDocument === true`)) {
		t.Error("the page was reloaded on its way to success")
	}
	if got := runStatus(t, srv.global(), id); got.Status != runstate.StatusSuccess {
		t.Errorf("the store has the run %s", got.Status)
	}
}

// Cancel with a reason, and see it in the trail; a refused action shows the
// store's message; a reader sees, but has nothing to act with.
func TestConsoleCancelsWithAReasonAndShowsRefusals(t *testing.T) {
	ctx := browser(t)
	// The page is refreshed once an hour: an out-of-band change stays
	// unseen, so that the page offers an action the store then refuses.
	// The page must stay as it was when someone else cancels, to offer the
	// cancel the store then refuses: an hour's poll, and no watch.
	srv := startConsoleWith(t, serveOptions{liveEvery: time.Hour, livePollOnly: true})
	bg := context.Background()
	wf := writeWorkflow(t, "name: deploy\nsteps:\n  - name: build\n    type: shell\n    command: echo built\n")
	first, err := srv.a.tracker.Create(bg, runstate.CreateRunParams{WorkflowName: "deploy", Labels: map[string]string{"team": "web", labelWorkflowFile: wf}})
	if err != nil {
		t.Fatal(err)
	}
	second, _ := srv.a.tracker.Create(bg, runstate.CreateRunParams{WorkflowName: "deploy"})

	signIn(t, ctx, srv.url, operatorToken)
	do(t, ctx, "cancel with a reason",
		goTo("#/runs/"+first.RunID),
		chromedp.WaitVisible(chromedp.CSS("#action-cancel")),
		chromedp.Click(chromedp.CSS("#action-cancel")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-reason")),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "wrong branch"),
		chromedp.Click(chromedp.CSS("#confirm-ok")))
	// The hour-long refresh does not apply to the first event of a new
	// stream: a reload shows the cancel.
	do(t, ctx, "reload", chromedp.Reload())
	until(t, ctx, "the run shows canceled", statusIs("canceled"))
	until(t, ctx, "the reason is in the trail", `document.querySelector("#audit").textContent.includes("wrong branch")`)
	until(t, ctx, "the trail names the principal", `document.querySelector("#audit tbody tr:last-child").textContent.includes("olivia as operator")`)
	trail, _ := srv.a.auditTrail(bg, first.RunID)
	if last := trail[len(trail)-1]; last.Reason != "wrong branch" || last.Actor.ID != "olivia" || last.Actor.Principal != "olivia" {
		t.Errorf("the store's trail ends with %+v", last)
	}

	// Retry the canceled run: the new run's page opens, pointing back at it.
	do(t, ctx, "retry it",
		chromedp.Click(chromedp.CSS("#action-retry")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")))
	until(t, ctx, "the retry's page opens", fmt.Sprintf(`location.hash !== "#/runs/%s" && document.querySelector(".chain")?.textContent.includes(%q)`, first.RunID, first.RunID))
	retryID := strings.TrimPrefix(get(t, ctx, "read the address", chromedp.Evaluate[string](`location.hash`)), "#/runs/")
	if retry, err := srv.a.runs.GetRun(bg, retryID); err != nil || retry.RetryOf != first.RunID || retry.Attempt != 2 {
		t.Errorf("the retry in the store: %+v, %v", retry, err)
	}

	do(t, ctx, "open the second run", goTo("#/runs/"+second.RunID), chromedp.WaitVisible(chromedp.CSS("#action-cancel")))
	if _, err := srv.a.operator.Cancel(bg, second.RunID, "by someone else"); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "cancel a run someone else has canceled",
		chromedp.Click(chromedp.CSS("#action-cancel")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")))
	until(t, ctx, "the refusal shows", `!document.querySelector("#error").hidden`)
	shown := get(t, ctx, "read the refusal", chromedp.Text(chromedp.CSS("#error")))
	if !strings.Contains(shown, "RUN_FINISHED") || !strings.Contains(shown, "the run has finished") {
		t.Errorf("the page shows %q, want the store's refusal", shown)
	}

	// A reader: the same run page, with no action, and a word on why.
	third, _ := srv.a.tracker.Create(bg, runstate.CreateRunParams{WorkflowName: "deploy"})
	do(t, ctx, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(t, ctx, srv.url, readerToken)
	do(t, ctx, "open a run as a reader", goTo("#/runs/"+third.RunID), chromedp.WaitVisible(chromedp.CSS("#reader-note")))
	buttons := get(t, ctx, "count the actions", chromedp.Evaluate[int](`document.querySelectorAll(".actions button").length`))
	if buttons != 0 {
		t.Errorf("a reader is offered %d actions", buttons)
	}
	who := get(t, ctx, "read who is signed in", chromedp.Text(chromedp.CSS("#who")))
	if who != "rita (reader)" {
		t.Errorf("signed in as %q", who)
	}
	// Dead letters, which a reader sees too.
	srv.a.dead.Add(tracker.DeadLetter{URL: "https://hooks.example/deploys", Event: tracker.Event{RunID: third.RunID, Status: "queued"},
		Attempts: 5, LastError: "connection refused", At: time.Now()})
	do(t, ctx, "open the dead letters", chromedp.Click(chromedp.CSS(`nav a[href="#/deadletters"]`)))
	until(t, ctx, "the dead letter shows", `document.querySelector("#deadletters")?.textContent.includes("connection refused")`)

	do(t, ctx, "a wrong token", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token"), chromedp.Click(chromedp.CSS(`.signin button[type="submit"]`)))
	until(t, ctx, "the wrong token is refused", `document.querySelector(".signin")?.textContent.includes("bearer token")`)
}

// Filters, counts and paging over 1,000 runs.
func TestConsoleFiltersAndPagesThousandRuns(t *testing.T) {
	ctx := browser(t)
	srv := startConsole(t, 200*time.Millisecond)
	bg := context.Background()
	var specs []runstate.CreateRunParams
	for i := range 1000 {
		p := runstate.CreateRunParams{WorkflowName: "deploy", Labels: map[string]string{"team": "blue"}}
		if i%2 == 1 {
			p.WorkflowName = "backup"
		}
		if i%4 == 0 {
			p.Labels["team"] = "red"
		}
		specs = append(specs, p)
	}
	res, err := runstate.CreateRuns(bg, srv.a.runs, runstate.CreateRunsParams{Runs: specs})
	if err != nil {
		t.Fatal(err)
	}
	// Of the first 30, a third each canceled, running and failed.
	worker := runstate.Actor{Kind: runstate.ActorWorker, ID: "w1"}
	for i, r := range res.Runs[:30] {
		var err error
		if i%3 == 0 {
			_, err = srv.a.operator.Cancel(bg, r.RunID, "too many")
		} else if r, err = srv.a.runs.UpdateRun(bg, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: "running", Actor: worker}); err == nil && i%3 == 2 {
			_, err = srv.a.runs.UpdateRun(bg, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: "failed", Actor: worker,
				Diagnostic: &runstate.Diagnostic{ErrorCode: "STEP_FAILED", Message: "build failed on web-1", Retryable: true}})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	signIn(t, ctx, srv.url, operatorToken)
	until(t, ctx, "the counts show", `document.querySelector('[data-status="queued"] .count')?.textContent === "970" &&
		["canceled", "running", "failed"].every(s => document.querySelector('[data-status="' + s + '"] .count')?.textContent === "10")`)
	screenshot(t, ctx, "console-runs.png")

	pageIDs := func() []string {
		return get(t, ctx, "read the page's runs", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#runs tbody tr")].map(r => r.dataset.run)`))
	}
	// backup runs are the odd ones: 500, of which none is red.
	do(t, ctx, "filter by workflow, 100 a page",
		chromedp.SetValue(chromedp.CSS("#f-workflow"), "backup"),
		chromedp.SetValue(chromedp.CSS("#f-limit"), "100"),
		chromedp.Click(chromedp.CSS(`form.filters button[type="submit"]`)))
	until(t, ctx, "the filter applies", `document.querySelector("#list-summary").textContent.includes("500 matching")`)
	seen := map[string]bool{}
	for page := 1; ; page++ {
		until(t, ctx, "page loads", fmt.Sprintf(`document.querySelectorAll("#runs tbody tr").length === 100 && !%q.includes(document.querySelector("#runs tbody tr")?.dataset.run)`, strings.Join(keys(seen), ",")))
		for _, id := range pageIDs() {
			if seen[id] {
				t.Fatalf("page %d repeats run %s", page, id)
			}
			seen[id] = true
		}
		if get(t, ctx, "look for the next page", chromedp.Evaluate[bool](`!document.querySelector("#page-next")`)) {
			if page != 5 {
				t.Errorf("the last page is page %d, want 5", page)
			}
			break
		}
		do(t, ctx, "next page", chromedp.Click(chromedp.CSS("#page-next")))
	}
	if len(seen) != 500 {
		t.Errorf("paging showed %d backup runs, want 500", len(seen))
	}
	for id := range seen {
		if r, _ := srv.a.runs.GetRun(bg, id); r.WorkflowName != "backup" {
			t.Fatalf("run %s of %s is on a backup page", id, r.WorkflowName)
		}
	}
	do(t, ctx, "previous page", chromedp.Click(chromedp.CSS("#page-prev")))
	until(t, ctx, "the fourth page shows", `document.querySelectorAll("#runs tbody tr").length === 100`)

	do(t, ctx, "filter by label and status",
		goTo("#/runs?label=team%3Dred&status=canceled"),
		chromedp.WaitVisible(chromedp.CSS("#runs")))
	// Red runs are every fourth from the first; every third of the first
	// 30 is canceled: runs 0, 12 and 24.
	until(t, ctx, "the label filter applies", `document.querySelector("#list-summary").textContent.includes("3 matching") &&
		document.querySelectorAll("#runs tbody tr").length === 3`)
	until(t, ctx, "counts follow the label filter", `document.querySelector('[data-status="queued"] .count')?.textContent === "242"`)
}

// On a phone-sized screen the run page needs no sideways scrolling, every
// control has a label, and an action is done with the keyboard alone: the
// dialog takes the focus, Escape backs out, Enter confirms.
func TestConsoleIsUsableNarrowAndByKeyboard(t *testing.T) {
	ctx := browser(t)
	srv := startConsole(t, 100*time.Millisecond)
	bg := context.Background()
	steps := []runstate.StepSpec{{Name: "build-the-thing-with-a-long-name", Hosts: []string{"web-1.example.internal", "web-2.example.internal"}}}
	r, err := srv.a.tracker.Create(bg, runstate.CreateRunParams{WorkflowName: "deploy", Steps: steps,
		Labels: map[string]string{"team": "web", "change": "a-rather-long-label-value-that-should-wrap"}})
	if err != nil {
		t.Fatal(err)
	}
	signIn(t, ctx, srv.url, operatorToken)
	do(t, ctx, "a narrow screen", chromedp.EmulateViewport(375, 800))
	do(t, ctx, "open the run", goTo("#/runs/"+r.RunID), chromedp.WaitVisible(chromedp.CSS("#action-cancel")))
	until(t, ctx, "the trail shows", `document.querySelectorAll("#audit tbody tr").length === 1`)
	if width := get(t, ctx, "measure the page", chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); width > 375 {
		t.Errorf("the run page is %dpx wide on a 375px screen", width)
	}
	screenshot(t, ctx, "console-run-narrow.png")
	do(t, ctx, "back to the list", goTo("#/"))
	until(t, ctx, "the list shows", `document.querySelectorAll("#runs tbody tr").length === 1`)
	if width := get(t, ctx, "measure the page", chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); width > 375 {
		t.Errorf("the runs list is %dpx wide on a 375px screen", width)
	}
	// The list follows the store too: a new run and a cancel show up
	// without a reload.
	do(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.sameDocument = true, undefined`))
	late, _ := srv.a.tracker.Create(bg, runstate.CreateRunParams{WorkflowName: "deploy"})
	until(t, ctx, "the new run shows in the list", fmt.Sprintf(`document.querySelectorAll("#runs tbody tr").length === 2 &&
		document.querySelector('[data-status="queued"] .count').textContent === "2" && !!document.querySelector('tr[data-run=%q]')`, late.RunID))
	srv.a.operator.Cancel(bg, late.RunID, "not needed")
	until(t, ctx, "the cancel shows in the list", fmt.Sprintf(`document.querySelector('tr[data-run=%q] .status').textContent === "canceled" &&
		document.querySelector('[data-status="canceled"] .count').textContent === "1" && window.sameDocument === true`, late.RunID))
	if unlabelled := get(t, ctx, "find controls without a label", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("input, select")].filter(e => e.labels.length === 0).map(e => e.id || e.name)`)); len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}

	do(t, ctx, "open the run", goTo("#/runs/"+r.RunID), chromedp.WaitVisible(chromedp.CSS("#action-cancel")),
		chromedp.Focus(chromedp.CSS("#action-cancel")), chromedp.KeyEvent(kb.Enter))
	until(t, ctx, "the dialog takes the focus", `document.querySelector("#confirm").open && document.activeElement.id === "confirm-reason"`)
	do(t, ctx, "back out", chromedp.KeyEvent(kb.Escape))
	until(t, ctx, "the dialog closes", `!document.querySelector("#confirm").open`)
	if got, _ := srv.a.runs.GetRun(bg, r.RunID); got.Status != runstate.StatusQueued {
		t.Fatalf("backing out changed the run: %s", got.Status)
	}
	do(t, ctx, "cancel by keyboard", chromedp.Focus(chromedp.CSS("#action-cancel")), chromedp.KeyEvent(kb.Enter))
	until(t, ctx, "the dialog takes the focus", `document.activeElement.id === "confirm-reason"`)
	do(t, ctx, "give a reason and confirm", chromedp.KeyEvent("typed by keyboard"+kb.Enter))
	until(t, ctx, "the run shows canceled", statusIs("canceled"))
	until(t, ctx, "the reason is in the trail", `document.querySelector("#audit").textContent.includes("typed by keyboard")`)
	until(t, ctx, "the change is announced", `document.querySelector("#announce").textContent === "Run canceled"`)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The page weight and time to first paint of a run with 50 steps and
// 1,000 audit events, logged for docs/demo-runner.md (no threshold: the
// machine's speed is not the console's).
func TestConsoleRunPageWeightAndFirstPaint(t *testing.T) {
	ctx := browser(t)
	srv := startConsole(t, time.Second)
	bg := context.Background()
	var steps []runstate.StepSpec
	for i := range 50 {
		steps = append(steps, runstate.StepSpec{Name: fmt.Sprintf("step-%02d", i+1), Hosts: []string{"web-1", "web-2"}})
	}
	r, err := srv.a.runs.CreateRun(bg, runstate.CreateRunParams{WorkflowName: "big", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	actor := runstate.Actor{Kind: runstate.ActorWorker, ID: "bench"}
	for i := 0; i < 999; i++ {
		to := runstate.StatusRunning
		if r.Status == runstate.StatusRunning {
			to = runstate.StatusWaiting
		}
		// The first 100 writes start, then end, each step on its two hosts.
		var patch []runstate.StepPatch
		if i < 100 {
			status, out := "running", "output of the step on this host, a line or two of it"
			if i >= 50 {
				status = "success"
			}
			patch = []runstate.StepPatch{{Name: steps[i%50].Name, Status: status, Hosts: []runstate.HostPatch{
				{Host: "web-1", Status: status, OutputSummary: &out}, {Host: "web-2", Status: status, OutputSummary: &out}}}}
		}
		if r, err = srv.a.runs.UpdateRun(bg, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: string(to),
			Steps: patch, Actor: actor, Reason: "turn " + fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if trail, _ := srv.a.auditTrail(bg, r.RunID); len(trail) != 1000 {
		t.Fatalf("the run has %d audit events, want 1000", len(trail))
	}
	signIn(t, ctx, srv.url, operatorToken)
	// A fresh document, as a new tab would load it (the token is the tab's).
	do(t, ctx, "open the run", goTo("#/runs/"+r.RunID), chromedp.Reload())
	until(t, ctx, "the run renders", `document.querySelectorAll("#audit tbody tr").length === 1000 && document.querySelectorAll("#steps tbody tr").length === 50`)
	// Chromium reports paint timings a moment after painting; a run whose
	// report does not come logs 0.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	chromedp.Run(pctx, chromedp.Poll[chromedp.Void](`performance.getEntriesByName("first-contentful-paint").length > 0`))
	cancel()
	type measures struct {
		FirstPaint, FirstContentfulPaint, Rendered float64
		Bytes, Requests                            int
	}
	m := get(t, ctx, "measure", chromedp.Evaluate[measures](`(() => {
		const paint = name => (performance.getEntriesByName(name)[0] || {}).startTime || 0;
		const rendered = performance.getEntriesByName("run-rendered").map(e => e.startTime);
		const entries = [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")];
		return {FirstPaint: paint("first-paint"), FirstContentfulPaint: paint("first-contentful-paint"),
			Rendered: Math.min(...rendered), Bytes: entries.reduce((n, e) => n + (e.encodedBodySize || 0), 0), Requests: entries.length};
	})()`))
	if m.Bytes == 0 || m.Rendered == 0 {
		t.Fatalf("nothing measured: %+v", m)
	}
	t.Logf("run page, 50 steps and 1,000 audit events: %d requests, %.0f KiB; first paint %.0f ms, first contentful paint %.0f ms, run rendered %.0f ms",
		m.Requests, float64(m.Bytes)/1024, m.FirstPaint, m.FirstContentfulPaint, m.Rendered)
}

// With polling every 10 minutes, a run page follows the run's writes
// only through the store's watch (Badger's in-process notices): each
// update shows on the page within seconds, and the page's status says it
// watches, and so does a cancel by another demo-runner process. With
// watching off (--live-poll-only) the same page stays as it was. The time from each update's call to the page's change is
// measured in the page and logged.
func TestConsoleRunPageUpdatesByWatching(t *testing.T) {
	for _, watching := range []bool{true, false} {
		name := map[bool]string{true: "watching", false: "watching off"}[watching]
		t.Run(name, func(t *testing.T) {
			ctx := browser(t)
			srv := startConsoleWith(t, serveOptions{liveEvery: 10 * time.Minute, livePollOnly: !watching})
			run, err := srv.a.runs.CreateRun(context.Background(), runstate.CreateRunParams{WorkflowName: "watched"})
			if err != nil {
				t.Fatal(err)
			}
			signIn(t, ctx, srv.url, operatorToken)
			do(t, ctx, "open the run", goTo("#/runs/"+run.RunID))
			until(t, ctx, "the run shows queued", statusIs("queued"))
			live := get(t, ctx, "read the live status", chromedp.Evaluate[string](`document.querySelector("#live").textContent`))
			if want := map[bool]string{true: "live, watching", false: "polling every 10m0s"}[watching]; !strings.Contains(live, want) ||
				(!watching && strings.Contains(live, "watching")) {
				t.Fatalf("the page's live status says %q, want it to say %q", live, want)
			}
			// The page notes when #run-status shows the status it waits for.
			do(t, ctx, "observe the status", chromedp.Evaluate[chromedp.Void](`window.sameDocument = true;
				window.awaited = ""; window.shownAt = 0;
				new MutationObserver(() => {
					if (!window.shownAt && window.awaited && document.querySelector("#run-status")?.textContent === window.awaited) window.shownAt = Date.now();
				}).observe(document.querySelector("main"), {subtree: true, childList: true, characterData: true}); undefined`))
			next := map[runstate.RunStatus]runstate.RunStatus{runstate.StatusQueued: runstate.StatusRunning,
				runstate.StatusRunning: runstate.StatusWaiting, runstate.StatusWaiting: runstate.StatusRunning}
			var latencies []time.Duration
			for range map[bool]int{true: 5, false: 1}[watching] {
				to := next[run.Status]
				do(t, ctx, "await "+string(to), chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`window.awaited = %q; window.shownAt = 0; undefined`, to)))
				began := time.Now()
				if run, err = srv.a.runs.UpdateRun(context.Background(), runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version,
					Status: string(to), Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "console-test"}}); err != nil {
					t.Fatal(err)
				}
				if !watching {
					// Only a poll, ten minutes away, would show it.
					time.Sleep(5 * time.Second)
					if shown := get(t, ctx, "read the status", chromedp.Evaluate[string](`document.querySelector("#run-status").textContent`)); shown != "queued" {
						t.Fatalf("with watching off and a 10m poll the page shows %q, want it still queued", shown)
					}
					return
				}
				until(t, ctx, "the run shows "+string(to), statusIs(string(to))+` && window.shownAt > 0`)
				shownAt := get(t, ctx, "read when", chromedp.Evaluate[int64](`window.shownAt`))
				latencies = append(latencies, time.UnixMilli(shownAt).Sub(began))
			}
			// Another process's write (a demo-runner command, through the
			// socket of serve, which holds the directory) wakes it too.
			do(t, ctx, "await canceled", chromedp.Evaluate[chromedp.Void](`window.awaited = "canceled"; window.shownAt = 0; undefined`))
			if _, errOut, code := demo(t, append(srv.global(), "cancel", run.RunID, "--reason", "from another process")...); code != 0 {
				t.Fatalf("cancel: exit %d\n%s", code, errOut)
			}
			until(t, ctx, "the run shows canceled", statusIs("canceled"))
			if !get(t, ctx, "check the page was not reloaded", chromedp.Evaluate[bool](`window.sameDocument === true`)) {
				t.Error("the page was reloaded")
			}
			t.Logf("update to page change, watching with a 10m poll: %v", latencies)
		})
	}
}
