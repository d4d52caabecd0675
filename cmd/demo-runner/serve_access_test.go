package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/access"
	"github.com/runstate/runstate/internal/testsupport/testlog"
	"github.com/runstate/runstate/internal/testsupport/testtls"
)

// Tokens of the principals the access tests use.
var testPrincipals = []struct {
	name  string
	role  access.Role
	token string
}{
	{"rita", access.RoleReader, "token-of-rita-the-reader"},
	{"olivia", access.RoleOperator, "token-of-olivia-the-operator"},
}

// writeTokens writes a tokens file naming testPrincipals.
func writeTokens(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("principals:\n")
	for _, p := range testPrincipals {
		fmt.Fprintf(&b, "  - name: %s\n    role: %s\n    token_sha256: %s\n", p.name, p.role, access.HashToken(p.token))
	}
	path := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeOffLoopbackNeedsTLSAndCredentials(t *testing.T) {
	for _, c := range []struct {
		o    serveOptions
		want string
	}{
		{serveOptions{addr: "0.0.0.0:8080", liveEvery: time.Second}, "not a loopback address"},
		{serveOptions{addr: ":8080", liveEvery: time.Second, tokensFile: "t.yaml"}, "not a loopback address"},
		{serveOptions{addr: "10.1.2.3:8080", liveEvery: time.Second, tlsCert: "c", tlsKey: "k"}, "not a loopback address"},
		{serveOptions{addr: "127.0.0.1:8080", liveEvery: time.Second, tlsCert: "c"}, "go together"},
		{serveOptions{addr: "127.0.0.1:8080", liveEvery: time.Millisecond}, "--live-every"},
	} {
		err := c.o.check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a refusal saying %q", c.o, err, c.want)
		}
	}
	for _, ok := range []serveOptions{
		{addr: "127.0.0.1:8080", liveEvery: time.Second},
		{addr: "localhost:8080", liveEvery: time.Second},
		{addr: "[::1]:8080", liveEvery: time.Second},
		{addr: "0.0.0.0:8443", liveEvery: time.Second, tlsCert: "c", tlsKey: "k", tokensFile: "t"},
	} {
		if err := ok.check(); err != nil {
			t.Errorf("%+v refused: %v", ok, err)
		}
	}
}

// A serve on every interface, as an operator would run it off loopback:
// TLS, and a token whose role allows the call; a state-changing request
// from another origin is refused whatever token it carries.
func TestServeOffLoopbackRefusesWhatCredentialsDoNotAllow(t *testing.T) {
	log := &testlog.Buffer{}
	a := apiAppLogging(t, log)
	dir := t.TempDir()
	ca := testtls.NewAuthority(t, "console test CA")
	certFile, keyFile := testtls.WritePair(t, ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour)), dir, "server")
	o := serveOptions{addr: "0.0.0.0:0", tlsCert: certFile, tlsKey: keyFile, tokensFile: writeTokens(t, dir), liveEvery: time.Second}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.serveListener(ctx, o, lis) }()
	defer func() { cancel(); <-served }()
	base := "https://127.0.0.1:" + fmt.Sprint(lis.Addr().(*net.TCPAddr).Port)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}, Timeout: 10 * time.Second}

	run, err := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	reader, operator := testPrincipals[0].token, testPrincipals[1].token
	send := func(method, path, token string, header map[string]string, body string) (int, problem) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p problem
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			if resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(b, &p) != nil {
				t.Errorf("%s %s: HTTP %d %q is not problem JSON", method, path, resp.StatusCode, b)
			}
		}
		return resp.StatusCode, p
	}
	cancelPath := "/runs/" + run.RunID + "/cancel"
	crossSite := map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	for _, c := range []struct {
		what, method, path, token string
		header                    map[string]string
		status                    int
		code                      string
	}{
		{"no token", "GET", "/runs", "", nil, 401, "UNAUTHENTICATED"},
		{"an unknown token", "GET", "/runs/" + run.RunID, "guessed", nil, 401, "UNAUTHENTICATED"},
		{"no token, an action", "POST", cancelPath, "", nil, 401, "UNAUTHENTICATED"},
		{"a reader's action", "POST", cancelPath, reader, nil, 403, "PERMISSION_DENIED"},
		{"a reader's retry", "POST", "/runs/" + run.RunID + "/retry", reader, nil, 403, "PERMISSION_DENIED"},
		{"an operator's action from another site", "POST", cancelPath, operator, crossSite, 403, "PERMISSION_DENIED"},
		{"an operator's action from another origin (Origin only)", "POST", cancelPath, operator, map[string]string{"Origin": "https://evil.example"}, 403, "PERMISSION_DENIED"},
		{"a reader reads", "GET", "/runs/" + run.RunID, reader, nil, 200, ""},
		{"a reader reads the audit", "GET", "/runs/" + run.RunID + "/audit", reader, nil, 200, ""},
		{"the console's files need no token", "GET", "/ui/", "", nil, 200, ""},
		{"a probe needs no token", "GET", "/healthz", "", nil, 200, ""},
	} {
		status, p := send(c.method, c.path, c.token, c.header, "")
		if status != c.status || p.Code != c.code {
			t.Errorf("%s: HTTP %d %s, want %d %s (%s)", c.what, status, p.Code, c.status, c.code, p.Detail)
		}
	}
	if got, _ := a.runs.GetRun(ctx, run.RunID); got.Status != runstate.StatusQueued || got.Version != run.Version {
		t.Fatalf("refused actions changed the run: %s v%d", got.Status, got.Version)
	}

	// The operator's cancel from the console's own origin goes through,
	// and the trail names the principal.
	status, p := send("POST", cancelPath, operator, map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}, `{"reason": "wrong branch"}`)
	if status != 200 {
		t.Fatalf("the operator's cancel: HTTP %d %+v", status, p)
	}
	trail, _ := a.auditTrail(ctx, run.RunID)
	if last := trail[len(trail)-1]; last.To != runstate.StatusCanceled || last.Actor != (runstate.Actor{Kind: runstate.ActorOperator, ID: "olivia", Principal: "olivia"}) || last.Reason != "wrong branch" {
		t.Errorf("the cancel is in the trail as %+v, want olivia's, as her principal, with her reason", last)
	}

	// Plain HTTP gets no answer from a TLS port.
	if resp, err := http.Get("http://127.0.0.1:" + fmt.Sprint(lis.Addr().(*net.TCPAddr).Port) + "/runs"); err == nil {
		if resp.StatusCode == 200 {
			t.Errorf("plain HTTP was answered 200")
		}
		resp.Body.Close()
	}
	for _, p := range testPrincipals {
		if strings.Contains(log.String(), p.token) {
			t.Errorf("the log shows %s's token:\n%s", p.name, log)
		}
	}
}

// On loopback without credentials, a request naming another host (a page
// whose name was rebound to 127.0.0.1) and a cross-site action are refused.
func TestLoopbackServeRefusesOtherHostsAndCrossSiteActions(t *testing.T) {
	a := apiApp(t)
	ctx := context.Background()
	run, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	h := a.handler()
	for _, c := range []struct {
		what, method, host, path string
		header                   map[string]string
		status                   int
	}{
		{"another host name", "GET", "evil.example:8080", "/runs", nil, 403},
		{"a cross-site form's cancel", "POST", "127.0.0.1:8080", "/runs/" + run.RunID + "/cancel?reason=x",
			map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/x-www-form-urlencoded"}, 403},
		{"localhost", "GET", "localhost:8080", "/runs", nil, 200},
		{"whoami", "GET", "127.0.0.1:8080", "/whoami", nil, 200},
	} {
		req, _ := http.NewRequest(c.method, "http://"+c.host+c.path, nil)
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: HTTP %d, want %d: %s", c.what, rec.Code, c.status, rec.Body)
		}
	}
	if got, _ := a.runs.GetRun(ctx, run.RunID); got.Status != runstate.StatusQueued {
		t.Errorf("a refused cross-site cancel changed the run: %s", got.Status)
	}
}
