package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/tracker"
)

// apiApp is a demo-runner app on a memory store, as serve runs it.
func apiApp(t *testing.T) *app {
	t.Helper()
	return apiAppLogging(t, io.Discard)
}

// apiAppLogging is apiApp with its log on stderr.
func apiAppLogging(t *testing.T, stderr io.Writer) *app {
	t.Helper()
	g := globals{storeName: "memory", dataDir: t.TempDir(), policy: "interrupt", logLevel: "error", lease: 30 * time.Second,
		notifyAttempts: 1, pluginConfig: kvFlag{}, workerID: "api-test"}
	if err := g.check(); err != nil {
		t.Fatal(err)
	}
	a, err := start(context.Background(), g, holds(), io.Discard, stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	return a
}

func openAPIDoc(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openAPIYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: "/"}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

func TestOpenAPIDescribesExactlyTheRoutes(t *testing.T) {
	doc, _ := openAPIDoc(t)
	var described, served []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			described = append(described, method+" "+path)
		}
	}
	for _, r := range apiApp(t).routes() {
		served = append(served, r.method+" "+r.pattern)
	}
	slices.Sort(described)
	slices.Sort(served)
	if !slices.Equal(described, served) {
		t.Errorf("openapi.yaml describes %v\nthe handler serves %v", described, served)
	}
}

// call sends a request to the API and checks the answer against the
// OpenAPI description: its status is documented for the operation, and
// its body matches the documented schema.
func call(t *testing.T, srv *httptest.Server, router routers.Router, method, target, contentType, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	route, params, err := router.FindRoute(mustRequest(t, method, target, contentType, body))
	if err != nil {
		// Outside the description: it must be refused as problem JSON.
		if resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: not described, and answered %d %s", method, target, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode, got, resp.Header
	}
	in := &openapi3filter.RequestValidationInput{Request: mustRequest(t, method, target, contentType, body), PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s: the answer does not match openapi.yaml: %v\n%s", method, target, err, got)
	}
	return resp.StatusCode, got, resp.Header
}

func mustRequest(t *testing.T, method, target, contentType, body string) *http.Request {
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

func problemCode(t *testing.T, body []byte) string {
	t.Helper()
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not problem JSON: %v\n%s", err, body)
	}
	return p.Code
}

func TestAPIAnswersAsDescribed(t *testing.T) {
	a := apiApp(t)
	_, router := openAPIDoc(t)
	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	ctx := context.Background()

	if code, body, _ := call(t, srv, router, "GET", "/runs", "", ""); code != 200 || !bytes.Contains(body, []byte(`"runs":[]`)) {
		t.Errorf("empty list: %d %s (want \"runs\":[])", code, body)
	}
	queued, err := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	done, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	call(t, srv, router, "POST", "/runs/"+done.RunID+"/cancel", "", "")

	for _, c := range []struct {
		method, target, contentType, body string
		status                            int
		code                              string
	}{
		{"GET", "/healthz", "", "", 200, ""},
		{"GET", "/runs?status=queued&label=a=b&limit=5", "", "", 200, ""},
		{"GET", "/runs/" + queued.RunID, "", "", 200, ""},
		{"GET", "/runs/" + queued.RunID + "/audit", "", "", 200, ""},
		{"GET", "/metrics", "", "", 200, ""},
		{"GET", "/openapi.json", "", "", 200, ""},
		{"GET", "/openapi.yaml", "", "", 200, ""},
		{"GET", "/runs/no-such-run", "", "", 404, "NOT_FOUND"},
		{"GET", "/runs/no-such-run/audit", "", "", 404, "NOT_FOUND"},
		{"GET", "/runs?limit=many", "", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/runs?status=sleeping", "", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/runs?label=novalue", "", "", 400, "INVALID_ARGUMENT"},
		{"POST", "/runs/" + queued.RunID + "/signal", "", "", 409, codeRunNotWaiting},
		{"POST", "/runs/" + done.RunID + "/cancel", "", "", 409, codeRunFinished},
		{"POST", "/runs/" + done.RunID + "/signal", "", "", 409, codeRunFinished},
		{"POST", "/runs/" + queued.RunID + "/cancel", "application/json", `{"reason": 7}`, 400, "INVALID_ARGUMENT"},
		{"POST", "/runs/" + queued.RunID + "/cancel", "application/json", `{"because": "x"}`, 400, "INVALID_ARGUMENT"},
		{"GET", "/runs/" + queued.RunID + "/audit?after=1", "", "", 200, ""},
		{"GET", "/runs/" + queued.RunID + "/audit?after=-1", "", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/whoami", "", "", 200, ""},
		{"GET", "/counts?workflow=wf&label=a=b", "", "", 200, ""},
		{"GET", "/counts?label=novalue", "", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/runs/" + queued.RunID + "/lease", "", "", 200, ""},
		{"GET", "/runs/no-such-run/lease", "", "", 404, "NOT_FOUND"},
		{"GET", "/deadletters", "", "", 200, ""},
		{"POST", "/runs/" + queued.RunID + "/retry", "", "", 409, codeRunNotRetryable},
		{"POST", "/runs/no-such-run/retry", "", "", 404, "NOT_FOUND"},
		{"DELETE", "/runs/" + queued.RunID, "", "", 405, "METHOD_NOT_ALLOWED"},
		{"GET", "/nothing/here", "", "", 404, "NOT_FOUND"},
	} {
		code, body, header := call(t, srv, router, c.method, c.target, c.contentType, c.body)
		if code != c.status {
			t.Errorf("%s %s: HTTP %d, want %d\n%s", c.method, c.target, code, c.status, body)
			continue
		}
		if c.code != "" {
			if header.Get("Content-Type") != "application/problem+json" || problemCode(t, body) != c.code {
				t.Errorf("%s %s: %s %s, want problem JSON with code %s", c.method, c.target, header.Get("Content-Type"), body, c.code)
			}
		}
		if c.status == 405 && header.Get("Allow") != "GET" {
			t.Errorf("405 without the Allow header: %q", header.Get("Allow"))
		}
	}
	if got, _ := a.runs.GetRun(ctx, queued.RunID); got.Status != runstate.StatusQueued {
		t.Errorf("refused cancels changed the run: %s", got.Status)
	}

	// The cancel's reason reaches the audit trail, from the body as from the query.
	code, body, _ := call(t, srv, router, "POST", "/runs/"+queued.RunID+"/cancel", "application/json", `{"reason": "wrong branch"}`)
	if code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	trail, _ := a.auditTrail(ctx, queued.RunID)
	if last := trail[len(trail)-1]; last.To != runstate.StatusCanceled || last.Reason != "wrong branch" {
		t.Errorf("the audit says %q, want the reason given", last.Reason)
	}
	other, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	call(t, srv, router, "POST", "/runs/"+other.RunID+"/cancel?reason=duplicate", "", "")
	trail, _ = a.auditTrail(ctx, other.RunID)
	if last := trail[len(trail)-1]; last.Reason != "duplicate" {
		t.Errorf("the audit says %q, want the query's reason", last.Reason)
	}
}

// GET /counts counts what GET /runs lists, by status; POST /runs/{id}/retry
// queues a new run pointing at the finished one.
func TestAPICountsAndRetries(t *testing.T) {
	a := apiApp(t)
	_, router := openAPIDoc(t)
	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	ctx := context.Background()
	wf := writeWorkflow(t, "name: wf\nsteps:\n  - name: s\n    type: sleep\n    duration: 1ms\n")
	var runs []runstate.RunSnapshot
	for i := range 5 {
		labels := map[string]string{labelWorkflowFile: wf}
		if i < 2 {
			labels["team"] = "red"
		}
		r, err := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf", Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "other"})
	if _, err := a.operator.Cancel(ctx, runs[0].RunID, "test"); err != nil {
		t.Fatal(err)
	}
	var counts runCounts
	_, body, _ := call(t, srv, router, "GET", "/counts?workflow=wf", "", "")
	if err := json.Unmarshal(body, &counts); err != nil || counts.Total != 5 || counts.ByStatus[runstate.StatusQueued] != 4 ||
		counts.ByStatus[runstate.StatusCanceled] != 1 || counts.ByStatus[runstate.StatusRunning] != 0 {
		t.Errorf("counts of wf: %s", body)
	}
	_, body, _ = call(t, srv, router, "GET", "/counts?label=team=red", "", "")
	if json.Unmarshal(body, &counts); counts.Total != 2 || counts.ByStatus[runstate.StatusCanceled] != 1 {
		t.Errorf("counts of team=red: %s", body)
	}

	code, body, _ := call(t, srv, router, "POST", "/runs/"+runs[0].RunID+"/retry", "", "")
	var retry runstate.RunSnapshot
	if json.Unmarshal(body, &retry); code != 201 || retry.RetryOf != runs[0].RunID || retry.Attempt != 2 || retry.Status != runstate.StatusQueued {
		t.Errorf("retry: HTTP %d %s", code, body)
	}
	if code, body, _ := call(t, srv, router, "GET", "/runs/"+runs[0].RunID+"/lease", "", ""); code != 200 || !bytes.Contains(body, []byte(`"known":true`)) {
		t.Errorf("lease of a run never leased: HTTP %d %s", code, body)
	}
}

// GET /runs/{id}/events sends the run at once, then again when it changes.
func TestRunEventsFollowTheStore(t *testing.T) {
	a := apiApp(t)
	a.liveEvery = 10 * time.Millisecond
	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	run, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/runs/"+run.RunID+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	events := bufio.NewScanner(resp.Body)
	type runEvent struct {
		Run      runstate.RunSnapshot
		AuditSeq int64 `json:"audit_seq"`
	}
	next := func() runEvent {
		t.Helper()
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				var ev runEvent
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					t.Fatal(err)
				}
				return ev
			}
		}
		t.Fatalf("the stream ended: %v", events.Err())
		return runEvent{}
	}
	if first := next(); first.Run.Status != runstate.StatusQueued || first.AuditSeq != 1 {
		t.Errorf("first event: %s, audit seq %d", first.Run.Status, first.AuditSeq)
	}
	canceled, err := a.operator.Cancel(ctx, run.RunID, "test")
	if err != nil {
		t.Fatal(err)
	}
	if second := next(); second.Run.Status != runstate.StatusCanceled || second.AuditSeq != 2 {
		t.Errorf("after the cancel: %s, audit seq %d", second.Run.Status, second.AuditSeq)
	}
	// A write refused on the finished run changes its trail, not its version.
	if _, err := a.runs.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: canceled.Version, Status: "running",
		Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "test"}}); !errors.Is(err, runstate.ErrInvalidTransition) {
		t.Fatalf("a move out of canceled: %v", err)
	}
	if third := next(); third.Run.Version != canceled.Version || third.AuditSeq != 3 {
		t.Errorf("after the rejected write: version %d, audit seq %d", third.Run.Version, third.AuditSeq)
	}
	_, router := openAPIDoc(t)
	code, _, _ := call(t, srv, router, "GET", "/runs/no-such-run/events", "", "")
	if code != 404 {
		t.Errorf("events of an unknown run: HTTP %d", code)
	}
}

// Every code of the contract gets its HTTP status, as problem JSON.
func TestErrorCodesMapToHTTPStatus(t *testing.T) {
	a := apiApp(t)
	want := map[runstate.Code]int{
		runstate.CodeInvalidArgument: 400, runstate.CodeMissingDiagnostic: 400, runstate.CodeUnauthenticated: 401,
		runstate.CodePermissionDenied: 403, runstate.CodeNotFound: 404, runstate.CodeAlreadyExists: 409,
		runstate.CodeVersionConflict: 409, runstate.CodeInvalidTransition: 409, runstate.CodeLeaseHeld: 409,
		runstate.CodeLeaseLost: 409, runstate.CodeNotClaimable: 409, runstate.CodeUnavailable: 503, runstate.CodeUnsupported: 501,
	}
	errs := map[runstate.Code]error{
		runstate.CodeInvalidArgument: runstate.ErrInvalidArgument, runstate.CodeMissingDiagnostic: runstate.ErrMissingDiagnostic,
		runstate.CodeUnauthenticated: runstate.ErrUnauthenticated, runstate.CodePermissionDenied: runstate.ErrPermissionDenied,
		runstate.CodeNotFound: runstate.ErrNotFound, runstate.CodeAlreadyExists: runstate.ErrAlreadyExists,
		runstate.CodeVersionConflict: runstate.ErrVersionConflict, runstate.CodeInvalidTransition: runstate.ErrInvalidTransition,
		runstate.CodeLeaseHeld: runstate.ErrLeaseHeld, runstate.CodeLeaseLost: runstate.ErrLeaseLost,
		runstate.CodeNotClaimable: runstate.ErrNotClaimable, runstate.CodeUnavailable: runstate.ErrUnavailable,
		runstate.CodeUnsupported: runstate.ErrUnsupported,
	}
	for code, status := range want {
		rec := httptest.NewRecorder()
		a.reply(rec, httptest.NewRequest("POST", "/runs/r/cancel", nil), nil, errs[code])
		if rec.Code != status || problemCode(t, rec.Body.Bytes()) != string(code) || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: HTTP %d %s, want %d", code, rec.Code, rec.Body, status)
		}
	}
	rec := httptest.NewRecorder()
	a.reply(rec, httptest.NewRequest("GET", "/runs", nil), nil, errors.New("disk on fire"))
	if rec.Code != 500 || problemCode(t, rec.Body.Bytes()) != codeInternal {
		t.Errorf("an error without a code: HTTP %d %s", rec.Code, rec.Body)
	}
}

// Every metric docs/demo-runner.md names is on /metrics, which parses as
// Prometheus text, and moves when what it counts happens.
func TestDocumentedMetricsAreScraped(t *testing.T) {
	a := apiApp(t)
	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	ctx := context.Background()
	run, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	if _, err := a.operator.Cancel(ctx, run.RunID, "test"); err != nil {
		t.Fatal(err)
	}
	a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	a.metrics.observeClaim(claimEmpty, time.Millisecond)
	(&tracker.FileDeadLetters{Path: a.dead.Path}).Add(tracker.DeadLetter{URL: "http://x/"})

	families := scrapeMetrics(t, srv.URL+"/metrics")
	doc, err := os.ReadFile("../../docs/demo-runner.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, name := range regexp.MustCompile(`\brunstate_[a-z_]+`).FindAllString(string(doc), -1) {
		documented[name] = true
	}
	if len(documented) < 10 {
		t.Fatalf("docs/demo-runner.md names %d metrics; the list is missing", len(documented))
	}
	for name := range documented {
		if families[name] == nil {
			t.Errorf("%s is documented but not on /metrics", name)
		}
	}
	for name := range families {
		if strings.HasPrefix(name, "runstate_") && !documented[name] {
			t.Errorf("%s is on /metrics but not documented", name)
		}
	}
	value := func(name, label, want string) float64 {
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == want {
					switch {
					case m.Counter != nil:
						return m.Counter.GetValue()
					case m.Gauge != nil:
						return m.Gauge.GetValue()
					case m.Histogram != nil:
						return float64(m.Histogram.GetSampleCount())
					}
				}
			}
			if label == "" && m.Gauge != nil {
				return m.Gauge.GetValue()
			}
		}
		return -1
	}
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"runstate_runs", "status", "queued", 1},
		{"runstate_runs", "status", "running", 0},
		{"runstate_run_status_changes_total", "status", "canceled", 1},
		{"runstate_run_status_changes_total", "status", "queued", 2},
		{"runstate_run_duration_seconds", "status", "canceled", 0}, // ended by the operator outside a command: not observed
		{"runstate_claim_duration_seconds", "result", "empty", 1},
		{"runstate_webhook_deliveries_total", "outcome", "delivered", 0},
		{"runstate_webhook_dead_letters", "", "", 1},
		{"runstate_lease_renew_failures_total", "", "", -1},
		{"runstate_lease_renewals_late_total", "", "", -1},
		{"runstate_leases_lost_total", "", "", -1},
	} {
		if c.want < 0 { // a counter without labels, at 0
			if f := families[c.name]; f == nil || f.GetMetric()[0].GetCounter().GetValue() != 0 {
				t.Errorf("%s: %v", c.name, f)
			}
			continue
		}
		if got := value(c.name, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
}

// scrapeMetrics reads and parses a /metrics page.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s does not parse as Prometheus text: %v", url, err)
	}
	return families
}
