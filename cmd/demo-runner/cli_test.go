package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/tracker"
)

// inProcess runs the demo-runner command line in this process.
func inProcess(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	if err != nil {
		code = exitFailure
		if e, ok := err.(exitError); ok {
			code = e.Code
			errOut.WriteString(e.Msg)
		} else {
			errOut.WriteString(err.Error())
		}
	}
	return out.String(), errOut.String(), code
}

func TestFlagsAndArgumentsMixFreely(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	out, errOut, code := inProcess(t, append(global, "submit", "../../examples/workflows/approval.yaml", "--priority", "3", "--label", "team=web")...)
	if code != 0 {
		t.Fatalf("submit FILE --priority: exit %d\n%s", code, errOut)
	}
	id := strings.TrimSpace(out)
	// The order docs/demo-runner.md writes: the run id, then the flag; and
	// a global flag after the command.
	if _, errOut, code := inProcess(t, "cancel", id, "--reason", "wrong branch", "--data-dir", global[1]); code != 0 {
		t.Fatalf("cancel RUN_ID --reason: exit %d\n%s", code, errOut)
	}
	out, _, _ = inProcess(t, append(global, "audit", id)...)
	var trail []runstate.AuditEvent
	if err := json.Unmarshal([]byte(out), &trail); err != nil {
		t.Fatal(err)
	}
	if last := trail[len(trail)-1]; last.To != runstate.StatusCanceled || last.Reason != "wrong branch" {
		t.Errorf("the audit ends %+v, want canceled for the reason given", last)
	}
	out, _, _ = inProcess(t, append(global, "status", id)...)
	var run runstate.RunSnapshot
	json.Unmarshal([]byte(out), &run)
	if run.Priority != 3 || run.Labels["team"] != "web" {
		t.Errorf("flags after the file were lost: priority %d, labels %v", run.Priority, run.Labels)
	}
}

// JSON output: empty lists are [], durations are seconds.
func TestJSONOutputConventions(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	out, errOut, code := inProcess(t, append(global, "recover")...)
	if code != 0 {
		t.Fatalf("recover: exit %d\n%s", code, errOut)
	}
	var report map[string]any
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatal(err)
	}
	if runs, ok := report["runs"].([]any); !ok || len(runs) != 0 {
		t.Errorf("recover's runs: %v, want []", report["runs"])
	}
	if _, ok := report["duration_seconds"].(float64); !ok || report["duration"] != nil {
		t.Errorf("recover's duration is not in seconds: %s", out)
	}
	for _, cmd := range []string{"list", "deadletters"} {
		out, _, _ := inProcess(t, append(global, cmd)...)
		if strings.Contains(out, "null") || !strings.Contains(out, "[]") {
			t.Errorf("%s on an empty store: %s", cmd, out)
		}
	}
}

func TestEveryCommandsHelpDescribesIt(t *testing.T) {
	root := newRoot(&globals{pluginConfig: kvFlag{}}, &options{})
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		out, _, code := inProcess(t, c.Name(), "--help")
		if code != 0 {
			t.Errorf("%s --help: exit %d", c.Name(), code)
		}
		description := c.Long
		if description == "" {
			description = c.Short
		}
		for _, want := range []string{description[:20], "Usage:\n  demo-runner " + c.Use, "Examples:\n  demo-runner " + c.Name(), "Global Flags:", "--store"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %q:\n%s", c.Name(), want, out)
			}
		}
	}
}

// version prints the kit's version, the protocol's and the protocol's
// features, as text or JSON, and opens no store.
func TestVersionPrintsTheKitTheProtocolAndItsFeatures(t *testing.T) {
	dir := t.TempDir()
	global := []string{"--data-dir", filepath.Join(dir, "data")}
	out, errOut, code := inProcess(t, append(global, "version")...)
	want := "kit: " + buildinfo.Version() + "\nprotocol: " + protocol.Version + "\nfeatures: " + strings.Join(protocol.Features(), " ") + "\n"
	if code != 0 || out != want {
		t.Errorf("version: exit %d %q\n%s\nwant:\n%s", code, errOut, out, want)
	}
	out, _, code = inProcess(t, append(global, "version", "--format", "json")...)
	var v buildinfo.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.Protocol != protocol.Version || v.Kit != buildinfo.Version() || len(v.Features) != len(protocol.Features()) {
		t.Errorf("version --format json: exit %d, %v: %+v", code, err, v)
	}
	if _, errOut, code := inProcess(t, append(global, "version", "--format", "yaml")...); code != exitUsage || !strings.Contains(errOut, "want text or json") {
		t.Errorf("version --format yaml: exit %d %q, want %d", code, errOut, exitUsage)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("version created the data directory")
	}
}

func TestShellCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, _, code := inProcess(t, "completion", shell)
		if code != 0 || !strings.Contains(out, "demo-runner") {
			t.Errorf("completion %s: exit %d, %d bytes", shell, code, len(out))
		}
	}
	out, _, _ := inProcess(t, "__complete", "--store", "")
	for _, kind := range []string{"memory", "badger:", "mysql:", "plugin:", "gateway:"} {
		if !strings.Contains(out, kind+"\n") {
			t.Errorf("--store completion lacks %s:\n%s", kind, out)
		}
	}
	out, _, _ = inProcess(t, "__complete", "list", "--status", "")
	if !strings.Contains(out, "waiting\n") {
		t.Errorf("--status completion lacks the statuses:\n%s", out)
	}
}

// Values that cannot work are refused at parse time, with a message that
// says what to give, before any store is opened or created.
func TestBadFlagsAreRefusedBeforeAnythingOpens(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "0", "list"}, "--lease 0s: want a positive duration"},
		{[]string{"--lease", "1000h", "list"}, "up to 24h"},
		{[]string{"--lease", "10s", "--renew", "20s", "list"}, "--renew 20s: want a positive duration shorter than --lease"},
		{[]string{"--store", "memory:extra", "list"}, "memory takes nothing after it"},
		{[]string{"--store", "oracle:x", "list"}, "want memory, badger:PATH"},
		{[]string{"--store", "badger:", "list"}, "needs a directory"},
		{[]string{"--store", "postgres:host=db password=hunter2 port=notaport", "list"}, "the DSN does not parse"},
		{[]string{"--store", "postgres://u:hunter2@[::1", "list"}, "the DSN does not parse"},
		{[]string{"--notify", "not a url", "list"}, "want an http:// or https:// URL"},
		{[]string{"--notify", "http:///nohost", "list"}, "names no host"},
		{[]string{"--recovery", "panic", "list"}, "want interrupt, fail or takeover"},
		{[]string{"--log-level", "loud", "list"}, "want debug, info, warn or error"},
		{[]string{"--notify-attempts", "0", "list"}, "at least one attempt"},
		{[]string{"worker", "--poll", "0s"}, "--poll 0s"},
		{[]string{"worker", "--statuses", "queued,finished"}, `"finished" is not claimable`},
		{[]string{"cancel"}, "cancel needs RUN_ID"},
		{[]string{"cancel", "a", "b"}, `takes one RUN_ID, got another: "b"`},
		{[]string{"list", "extra"}, `list takes no arguments, got "extra"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"list", "--limit", "many"}, `invalid argument "many"`},
		{[]string{"--store", "x", "--store-file", "f", "list"}, "exclude each other"},
		{[]string{"--store-file", "/no/such/file", "list"}, "--store-file: open /no/such/file"},
		{[]string{"--plugin-config-file", "/no/such/file", "list"}, "--plugin-config-file: open /no/such/file"},
	} {
		dir := t.TempDir()
		_, errOut, code := inProcess(t, append([]string{"--data-dir", filepath.Join(dir, "data")}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: exit %d %q, want exit %d saying %q, and no password", c.args, code, errOut, exitUsage, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
			t.Errorf("%v: the data directory was created for a command refused at parse time", c.args)
		}
	}
}

// A DSN's password and a webhook's credentials never reach argv, a log
// line, an error, a dead letter or an HTTP answer.
func TestSecretsNeverShow(t *testing.T) {
	const password = "Pw-9f3c-never-shown"
	dsn := mysqlUserWithPassword(t, password)
	dir := t.TempDir()
	storeFile := filepath.Join(dir, "store")
	if err := os.WriteFile(storeFile, []byte("mysql:"+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := "http://hookuser:" + password + "@" + freePort(t) + "/hook?token=" + password // nothing listens
	global := []string{"--data-dir", dir, "--store-file", storeFile, "--notify", "", "--notify-attempts", "1"}
	global[5] = hook
	var seen []string
	check := func(what, text string) {
		t.Helper()
		seen = append(seen, what)
		if strings.Contains(text, password) {
			t.Errorf("%s shows the password:\n%s", what, text)
		}
	}

	out, errOut, code := demo(t, append(global, "run", "../../examples/workflows/hello.yaml")...)
	if code != 0 {
		t.Fatalf("run on a store from --store-file: exit %d\n%s", code, errOut)
	}
	check("run's output", out+errOut)
	id := strings.Fields(out)[0]

	// The same store from the environment, in a long-running process
	// whose argv is readable by everyone on the machine.
	addr := freePort(t)
	cmd := exec.Command(binaries.Path(t, demoPkg), "--data-dir", dir, "serve", "--addr", addr)
	cmd.Env = append(os.Environ(), envStore+"=mysql:"+dsn)
	srv := startCommand(t, cmd)
	srv.await(t, "serving", 20*time.Second)
	argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	check("serve's argv", string(argv))
	for _, path := range []string{"/runs/" + id, "/runs/nope", "/runs?limit=x", "/runs/" + id + "/audit", "/metrics", "/healthz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		check("GET "+path, body.String())
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	cmd.Wait()
	check("serve's log", srv.logs())

	out, errOut, _ = demo(t, "--data-dir", dir, "deadletters")
	check("deadletters", out+errOut)
	var letters []tracker.DeadLetter
	if err := json.Unmarshal([]byte(out), &letters); err != nil || len(letters) == 0 {
		t.Fatalf("no dead letters to look at: %v\n%s", err, out)
	}
	if !strings.Contains(letters[0].URL, "hookuser:<redacted>@") || !strings.Contains(letters[0].URL, "token=<redacted>") {
		t.Errorf("the dead letter's URL %q does not show what it redacted", letters[0].URL)
	}

	// Wrong or malformed, given on the command line anyway: the refusal
	// does not repeat it.
	wrong := strings.Replace(dsn, password, password+"x", 1)
	for i, args := range [][]string{
		{"--store", "mysql:" + wrong, "list"},
		{"--store", "mysql:" + strings.TrimSuffix(wrong, "/"+strings.SplitN(wrong, "/", 2)[1]), "list"},
		{"--store", "mysql:" + dsn, "--notify", "ftp://u:" + password + "@host/", "list"},
	} {
		out, errOut, code := demo(t, append([]string{"--data-dir", dir}, args...)...)
		if code == 0 {
			t.Errorf("bad store or URL %d: accepted", i)
		}
		check(fmt.Sprintf("the refusal of bad store or URL %d", i), out+errOut)
	}
	t.Logf("checked: %s", strings.Join(seen, ", "))
}

// mysqlUserWithPassword makes a MySQL user with password on a fresh
// database and returns its DSN.
func mysqlUserWithPassword(t *testing.T, password string) string {
	t.Helper()
	rootDSN := freshDatabase(t)
	cfg, err := gomysql.ParseDSN(rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	user := fmt.Sprintf("rs_secret_%d", time.Now().UnixNano()%1e9)
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password),
		fmt.Sprintf("CREATE USER '%s'@'localhost' IDENTIFIED BY '%s'", user, password),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", cfg.DBName, user),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'localhost'", cfg.DBName, user),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		db, _ := sql.Open("mysql", rootDSN)
		db.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%', '%s'@'localhost'", user, user))
		db.Close()
	})
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN()
}

// TestGuideCommandsRunAsWritten runs every command of docs/demo-runner.md's
// shell blocks as written, with the placeholders filled in: RUN_ID with a
// run the command can take, mysql:DSN with a fresh database, deploy.yaml
// with a workflow. Long-running commands must start and stop on SIGTERM.
func TestGuideCommandsRunAsWritten(t *testing.T) {
	guide, err := os.ReadFile("../../docs/demo-runner.md")
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := filepath.Abs("../..")
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	os.Mkdir(binDir, 0o755)
	if err := os.Symlink(binaries.Path(t, demoPkg), filepath.Join(binDir, "demo-runner")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(repo, "examples"), filepath.Join(dir, "examples"))
	os.WriteFile(filepath.Join(dir, "deploy.yaml"), []byte("name: deploy\nsteps:\n  - name: build\n    type: shell\n    command: echo built\n"), 0o644)
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "HOME="+dir)
	dsn := freshDatabase(t)

	shell := func(line string) (string, string, int) {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return out.String(), errOut.String(), code
	}
	runID := func(line string) string {
		t.Helper()
		out, errOut, _ := shell(line)
		f := strings.Fields(out)
		if len(f) == 0 {
			t.Fatalf("%s printed no run id\n%s", line, errOut)
		}
		return f[0]
	}
	// Runs in the state each command needs, on the default store.
	waiting := func() string {
		cmd := exec.Command(filepath.Join(binDir, "demo-runner"), "run", "examples/workflows/approval.yaml")
		cmd.Dir, cmd.Env = dir, env
		p := startCommand(t, cmd)
		id := p.await(t, `run created.*run_id=(\S+)`, 30*time.Second)[1]
		p.await(t, `waiting for a signal|waits for a signal|wait`, 30*time.Second)
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		return id
	}
	verbRE := regexp.MustCompile(`\b(run|submit|worker|status|list|audit|cancel|signal|retry|recover|serve|deadletters)\b`)
	ran := 0
	for _, f := range fencesOf(string(guide)) {
		if f.lang != "sh" {
			continue
		}
		for _, line := range strings.Split(f.body, "\n") {
			line = strings.TrimSpace(commentRE.ReplaceAllString(line, ""))
			if line == "" {
				continue
			}
			line = strings.ReplaceAll(line, "go run ./cmd/demo-runner", "demo-runner")
			line = strings.ReplaceAll(line, "mysql:DSN", "'mysql:"+dsn+"'")
			line = exampleDSN.ReplaceAllString(line, "mysql:"+dsn)
			verb := verbRE.FindString(strings.TrimPrefix(line, "demo-runner"))
			switch verb {
			case "status", "audit":
				line = strings.ReplaceAll(line, "RUN_ID", runID("demo-runner run examples/workflows/hello.yaml"))
			case "cancel":
				line = strings.ReplaceAll(line, "RUN_ID", runID("demo-runner submit examples/workflows/approval.yaml"))
			case "signal":
				line = strings.ReplaceAll(line, "RUN_ID", waiting())
			case "retry":
				line = strings.ReplaceAll(line, "RUN_ID", runID("demo-runner run examples/workflows/flaky.yaml"))
			}
			if strings.Contains(line, "RUN_ID") || strings.Contains(line, "DSN") {
				t.Fatalf("a placeholder this test does not fill: %s", line)
			}
			ran++
			if verb == "worker" || verb == "serve" {
				if verb == "serve" {
					line = strings.ReplaceAll(line, "127.0.0.1:8080", freePort(t))
				}
				cmd := exec.Command("bash", "-c", "exec "+line)
				cmd.Dir, cmd.Env = dir, env
				p := startCommand(t, cmd)
				p.await(t, `worker started|serving`, 30*time.Second)
				cmd.Process.Signal(syscall.SIGTERM)
				if err := cmd.Wait(); err != nil {
					t.Errorf("%s: on SIGTERM: %v\n%s", line, err, p.logs())
				}
				continue
			}
			out, errOut, code := shell(line)
			want := 0
			if verb == "retry" {
				want = exitRunFailed // the flaky workflow fails again
			}
			if code != want {
				t.Errorf("%s: exit %d, want %d\n%s%s", line, code, want, out, errOut)
			}
		}
	}
	if ran < 8 {
		t.Errorf("ran %d commands from the guide; its shell blocks went missing", ran)
	}
}

var commentRE = regexp.MustCompile(`\s+#.*$`)

// exampleDSN is the shape of the DSNs the guide shows, with a password.
var exampleDSN = regexp.MustCompile(`mysql:[a-z]+:[^@\s]+@tcp\(db:3306\)/[a-z]+`)

var fenceRE = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```$")

type fence struct{ lang, body string }

func fencesOf(md string) []fence {
	var out []fence
	for _, m := range fenceRE.FindAllStringSubmatch(md, -1) {
		out = append(out, fence{m[1], m[2]})
	}
	return out
}

// audit shows who wrote: the principal beside the actor it acted for.
func TestAuditShowsThePrincipal(t *testing.T) {
	a := apiApp(t)
	var out strings.Builder
	a.stdout = &out
	run, err := a.runs.CreateRun(context.Background(), runstate.CreateRunParams{WorkflowName: "w",
		Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "cron", Principal: "ops-token"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.printResult(a.auditTrail(context.Background(), run.RunID)); err != nil {
		t.Fatal(err)
	}
	var trail []struct {
		Actor map[string]string `json:"actor"`
	}
	if err := json.Unmarshal([]byte(out.String()), &trail); err != nil {
		t.Fatal(err)
	}
	if len(trail) != 1 || trail[0].Actor["principal"] != "ops-token" || trail[0].Actor["id"] != "cron" {
		t.Errorf("audit printed %s, want the created event by cron with principal ops-token", out.String())
	}
}
