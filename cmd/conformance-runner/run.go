package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger/badgertest"
	"github.com/runstate/runstate/adapters/etcd/etcdtest"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/adapters/mysql/mysqltest"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/adapters/postgres/pgtest"
	pgscratch "github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/gateway/gatewaytest"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/plugin/plugintest"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/stores"
	_ "github.com/runstate/runstate/stores/all" // every store kind --store names
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitPass    = 0 // every selected rule passed (skips allowed)
	exitFail    = 1 // at least one rule failed
	exitUsage   = 2 // the command line is wrong, or names a store that holds runs
	exitHarness = 3 // the harness broke: the store could not be started or a check could not run
)

// exitError carries an exit code out of run (see cli.ExitError).
type exitError = cli.ExitError

func usageError(format string, args ...any) error { return cli.Errorf(exitUsage, format, args...) }

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Type() string   { return "list" }
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// configFlag collects repeated key=value settings.
type configFlag = cli.KVFlag

const rootLong = `conformance-runner certifies a runstate store against docs/spec.md: it runs every
selected rule's checks on the store and reports the verdict per rule.

Stores:
  --adapter memory           the in-memory reference store (default)
  --adapter badger           the Badger store, a fresh directory per check (--config dir=BASE, nosync=true)
  --adapter mysql            the MySQL store, a fresh database per check (--config dsn=user:pass@tcp(host:3306)/)
  --adapter postgres         the PostgreSQL store, a fresh schema per check in the database
                             --config dsn=postgres://user:pass@host:5432/database names
  --adapter etcd             the etcd store, a fresh key prefix per check on the cluster
                             --config endpoints=host:2379[,host:2379…] names
  --plugin PATH              a store plugin binary, started afresh for every check. Its store must
                             start empty: give each check its own place with {{tempdir}} (a new
                             directory) or {{unique}} (a new token) in --config values. It is opened
                             for certification: its store reads a test clock the checks move (a plugin
                             whose Opener passes plugin.TestClock on; else, or with --real-clock, real time)
  --proxy-backend HOST:PORT  with --plugin: a fault proxy in front of the plugin's own server for every
                             check; {{proxy}} in --config values is its address, and the FAULT rules
                             partition, reset and delay the plugin's connections through it
  --gateway PATH             the runstate-gateway binary, started afresh for every check on loopback in
  --store NAME               front of the store NAME names (memory, badger:PATH, mysql:DSN, postgres:DSN,
                             plugin:PATH, as runstate-gateway --store; also --config store=NAME), and
                             reached over TCP as an operator; in test mode, its store on a clock the
                             checks move (not a plugin's, nor with a gateway built before test mode;
                             --real-clock keeps real time), and killed and started again for the FAULT
                             rules when the store outlives it (not memory)

Checks create runs and claim runnable ones: a store that holds runs before the first check is
refused (exit 2) before anything is written, unless --allow-stored-runs is given. Secret
configuration values (keys naming dsn, password, secret, token or credential, and --secret
keys) are redacted in every report.

Exit codes: 0 all selected rules pass, 1 a rule failed, 2 usage error (a --config the plugin
refuses too) or a store that holds runs, 3 the harness broke.`

const rootExample = `  conformance-runner
  conformance-runner --adapter badger --run LEASE,BATCH --markdown report.md
  conformance-runner --plugin ./runstate-plugin-badger --config dir={{tempdir}}
  conformance-runner --plugin ./runstate-plugin-mysql \
      --config 'dsn=user:pass@tcp(host:3306)/runs_{{unique}}' --config scratch_database=true
  conformance-runner --plugin ./runstate-plugin-postgres --proxy-backend db:5432 \
      --config 'dsn=postgres://user@{{proxy}}/runs' --config 'schema=runs_{{unique}}' --config scratch_schema=true
  conformance-runner --adapter postgres --config 'dsn=postgres://user@db:5432/runs'
  conformance-runner --gateway ./runstate-gateway --store 'badger:{{tempdir}}/s'
  conformance-runner --list-rules --run LEASE
  conformance-runner version --format json`

type options struct {
	adapter, pluginPath, gatewayPath, storeName                      string
	proxyBackend                                                     string
	format, junit, markdown                                          string
	configFile                                                       string
	config                                                           configFlag
	secret, run, skip                                                listFlag
	realClock, listRules, allowStoredRuns, killPlugin, secondProcess bool
	attachments                                                      string
	ttl, timeout                                                     time.Duration
}

// newRoot builds the command tree: certification at the root, bench below.
func newRoot() *cobra.Command {
	o := &options{config: configFlag{}}
	root := &cobra.Command{
		Use:     "conformance-runner",
		Short:   "Certify a runstate store against docs/spec.md",
		Long:    rootLong,
		Example: rootExample,
		Args:    cli.ExactArgs(),
		// The command line is checked whole before anything starts.
		PreRunE: func(*cobra.Command, []string) error { return o.check() },
		RunE: func(c *cobra.Command, _ []string) error {
			return certify(c.Context(), *o, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := root.Flags()
	addTargetFlags(fs, o)
	addCheckFlags(fs, o)
	fs.BoolVar(&o.realClock, "real-clock", false, "built-in stores and plugins: keep real time and sleep through lease TTLs instead of moving the store's clock")
	fs.BoolVar(&o.listRules, "list-rules", false, "print every selected rule with its statement and exit")
	fs.StringVar(&o.attachments, "attachments", "", "directory for files that explain failures, such as a non-linearizable history (default: beside --markdown or --junit)")
	fs.Var(&o.run, "run", "rule IDs or areas to run, comma-separated (default all)")
	fs.Var(&o.skip, "skip", "rule IDs or areas to skip, comma-separated")
	root.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	root.AddCommand(newBenchCommand(), newCertifyCommand(), cli.VersionCommand(root.Name()))
	return root
}

// check checks certification's flags before anything starts.
func (o *options) check() error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format %q: want text or json", o.format)
	}
	if o.secondProcess && o.pluginPath == "" {
		return usageError("--second-process goes with --plugin (the built-in stores declare their second handle themselves)")
	}
	if o.killPlugin && o.pluginPath == "" {
		return usageError("--kill-plugin goes with --plugin (the MySQL and PostgreSQL adapters declare their faults themselves)")
	}
	if o.timeout <= 0 || o.ttl < 0 {
		return usageError("--timeout %v and --ttl %v: want a positive time limit and a TTL of 0 (the default) or more", o.timeout, o.ttl)
	}
	if _, err := conformance.Select(o.run, o.skip); err != nil {
		return usageError("%v", err)
	}
	if err := o.checkTarget(); err != nil {
		return err
	}
	return o.checkProxyBackend()
}

// addTargetFlags adds the flags that name the store, shared by
// certification and bench.
func addTargetFlags(fs *pflag.FlagSet, o *options) {
	fs.StringVar(&o.adapter, "adapter", "", "built-in store: memory, badger, mysql, postgres or etcd")
	fs.StringVar(&o.pluginPath, "plugin", "", "path of a store plugin binary")
	fs.StringVar(&o.gatewayPath, "gateway", "", "path of the runstate-gateway binary, to reach a store through it")
	fs.StringVar(&o.storeName, "store", "", "with --gateway: the store the gateway serves, "+stores.Forms()+"; {{tempdir}} and {{unique}} in it are made afresh for every check (as --config store=…)")
	fs.Var(o.config, "config", "store configuration key=value (repeatable); secrets are redacted in reports")
	fs.StringVar(&o.configFile, "config-file", "", "more store configuration, a key=value per line (keeps a DSN's password out of ps; --config wins)")
	fs.Var(&o.secret, "secret", "configuration keys whose values are secret (keys naming dsn, password, secret, token or credential are anyway)")
}

// addCheckFlags adds the flags that say how checks run and report, shared
// by certification and certify.
func addCheckFlags(fs *pflag.FlagSet, o *options) {
	fs.DurationVar(&o.ttl, "ttl", 0, "lease TTL the checks use with real time (default 300ms; 1s for a plugin or gateway process)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "time limit of one check")
	fs.StringVar(&o.format, "format", "text", "stdout format: text or json")
	fs.StringVar(&o.junit, "junit", "", "also write a JUnit XML report to this file")
	fs.StringVar(&o.markdown, "markdown", "", "also write a Markdown report to this file")
	fs.BoolVar(&o.killPlugin, "kill-plugin", false, "plugins: declare the restart fault, for a store whose data outlives its process: the FAULT rules kill the plugin (SIGKILL) and its client starts it again")
	fs.BoolVar(&o.secondProcess, "second-process", false, "plugins: declare a second handle, for a store that two processes may open at once on one configuration (a database server, or a file that two processes open together, as SQLite's): checks that need a second worker start another plugin process on the same configuration, {{tempdir}} and {{unique}} included")
	fs.StringVar(&o.proxyBackend, "proxy-backend", "", "plugins: HOST:PORT of the plugin's own server (its database): every check puts a fault proxy in front of it, {{proxy}} in --config values becomes the proxy's address, and the FAULT rules partition, reset and delay the plugin's connections")
	fs.BoolVar(&o.allowStoredRuns, "allow-stored-runs", false, "run although the store holds runs: checks may change and claim them, and listing checks fail")
}

// applyCheckFlags sets on t what the flags say of every check: --ttl
// only when given, so that a target's own lease (a process's 1s) stays.
func (o options) applyCheckFlags(t *conformance.Target) {
	if o.ttl > 0 {
		t.LeaseTTL = o.ttl
	}
	t.CheckTimeout, t.AllowStoredRuns = o.timeout, o.allowStoredRuns
}

// checkTarget refuses conflicting store flags and defaults to memory.
func (o *options) checkTarget() error {
	if o.configFile != "" {
		if err := o.config.AddFile(o.configFile); err != nil {
			return usageError("--config-file: %v", err)
		}
	}
	switch {
	case (o.adapter != "" && o.pluginPath != "") || (o.gatewayPath != "" && (o.adapter != "" || o.pluginPath != "")):
		return usageError("--adapter, --plugin and --gateway exclude each other")
	case o.pluginPath == "" && o.adapter == "" && o.gatewayPath == "":
		o.adapter = "memory"
	}
	return o.checkGatewayStore()
}

// checkGatewayStore takes the store a gateway serves from --store or
// --config store=…, and refuses a name the gateway would refuse.
func (o *options) checkGatewayStore() error {
	_, inConfig := o.config["store"]
	switch {
	case o.storeName != "" && o.gatewayPath == "":
		return usageError("--store names the store a gateway serves: give --gateway PATH too (a built-in store is --adapter)")
	case o.storeName != "" && inConfig:
		return usageError("--store and --config store=… name the same store: give one")
	case o.storeName != "":
		o.config["store"] = o.storeName
	case o.gatewayPath == "":
		return nil
	}
	name := o.config["store"]
	if name == "" {
		return usageError("--gateway needs --store NAME (or --config store=NAME): %s, e.g. badger:{{tempdir}}/s", stores.Forms())
	}
	if err := stores.Check(name); err != nil {
		return usageError("--store %s", runstate.MessageOf(err))
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Execute(ctx, newRoot(), args, stdout, stderr, exitUsage)
}

// certify runs the selected rules on the store and reports.
func certify(ctx context.Context, o options, stdout, stderr io.Writer) error {
	rules, err := conformance.Select(o.run, o.skip)
	if err != nil {
		return usageError("%v", err)
	}
	if o.listRules {
		for _, r := range rules {
			fmt.Fprintf(stdout, "%-10s %s\n", r.ID, r.Statement)
		}
		return nil
	}
	target, cleanup, err := o.target(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	o.applyCheckFlags(&target)
	if !o.allowStoredRuns {
		if err := conformance.CheckEmpty(ctx, target); errors.Is(err, conformance.ErrStoreNotEmpty) {
			return usageError("refusing to certify %s: %v.\nChecks create runs and claim runnable ones, so they need an empty store; "+
				"no run has been created or claimed (opening the store may have created its schema). Point the store at a scratch place, e.g. --config dir={{tempdir}}, or with the MySQL plugin "+
				"--config 'dsn=user:pass@tcp(host:3306)/runs_{{unique}}' --config scratch_database=true; "+
				"or pass --allow-stored-runs to run on this store anyway", target.Name, err)
		} else if err != nil {
			return exitError{Code: exitHarness, Msg: fmt.Sprintf("cannot see whether the store is empty: %v", err)}
		}
	}

	rep := report{Suite: conformance.Version, Adapter: target.Name, StoreVersion: target.StoreVersion,
		Capabilities: target.Capabilities, Config: o.reportedConfig(), Environment: environment(),
		Started: time.Now().UTC()}
	fmt.Fprintf(stderr, "certifying %s against %d rules\n", target.Name, len(rules))
	if o.pluginPath != "" && !o.realClock && !target.Capabilities.ControlledClock {
		fmt.Fprintln(stderr, "note: the plugin's store does not read the test clock (its Opener does not pass plugin.TestClock(ctx) on): it keeps real time, and the controlled-clock rules skip")
	}
	rep.Results = conformance.RunRules(ctx, target, rules, func(r conformance.Result) {
		fmt.Fprintf(stderr, "%-5s %-10s %v\n", strings.ToUpper(string(r.Outcome)), r.Rule.ID, r.Duration.Round(time.Millisecond))
	})
	rep.Duration = time.Since(rep.Started)
	rep.Counts = tally(rep.Results)
	if err := writeAttachments(o, rep.Results); err != nil {
		return exitError{Code: exitHarness, Msg: err.Error()}
	}
	if err := writeReports(stdout, o, rep); err != nil {
		return exitError{Code: exitHarness, Msg: err.Error()}
	}
	switch {
	case rep.Counts[conformance.Error] > 0:
		return exitError{Code: exitHarness}
	case rep.Counts[conformance.Fail] > 0:
		return exitError{Code: exitFail}
	}
	return nil
}

func writeReports(stdout io.Writer, o options, rep report) error {
	if o.format == "json" {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		writeText(stdout, rep)
	}
	for _, f := range []struct {
		path  string
		write func(io.Writer) error
	}{
		{o.junit, func(w io.Writer) error { return writeJUnit(w, rep) }},
		{o.markdown, func(w io.Writer) error { writeMarkdown(w, rep, filepath.Dir(o.markdown)); return nil }},
	} {
		if f.path == "" {
			continue
		}
		file, err := os.Create(f.path)
		if err != nil {
			return err
		}
		if err := f.write(file); err != nil {
			file.Close()
			return err
		}
		if err := file.Close(); err != nil {
			return err
		}
	}
	return nil
}

// writeAttachments writes the files checks made into the attachments
// directory (by default the directory of the Markdown or JUnit report),
// each named after its rule, and records where in the results.
func writeAttachments(o options, results []conformance.Result) error {
	dir := o.attachments
	for _, report := range []string{o.markdown, o.junit} {
		if dir == "" && report != "" {
			dir = filepath.Dir(report)
		}
	}
	if dir == "" || !slices.ContainsFunc(results, func(r conformance.Result) bool { return len(r.Attachments) > 0 }) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range results {
		for j := range results[i].Attachments {
			a := &results[i].Attachments[j]
			a.Path = filepath.Join(dir, results[i].Rule.ID+"-"+filepath.Base(a.Name))
			if err := os.WriteFile(a.Path, a.Data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// target builds the conformance target the options name.
// The cleanup removes what the target made for all its checks.
func (o options) target(ctx context.Context) (conformance.Target, func(), error) {
	none := func() {}
	if o.pluginPath != "" {
		t, err := o.pluginTarget(ctx)
		return t, none, err
	}
	if o.gatewayPath != "" {
		return o.gatewayTarget(ctx)
	}
	t, err := o.builtinTarget()
	return t, none, err
}

// builtinTarget is the target of a built-in store, --adapter.
func (o options) builtinTarget() (conformance.Target, error) {
	known := map[string][]string{"memory": nil, "badger": {"dir", "nosync"}, "mysql": {"dsn"}, "postgres": {"dsn"}, "etcd": {"endpoints"}}
	keys, ok := known[o.adapter]
	if !ok {
		return conformance.Target{}, usageError("--adapter %q: want memory, badger, mysql, postgres or etcd", o.adapter)
	}
	for k := range o.config {
		if !slices.Contains(keys, k) {
			return conformance.Target{}, usageError("--config %s: the %s adapter takes %v", k, o.adapter, keys)
		}
	}
	switch o.adapter {
	case "badger":
		base := o.config["dir"]
		if base == "" {
			base = os.TempDir()
		}
		return badgertest.Target(base, !o.realClock), nil
	case "mysql":
		dsn := o.config["dsn"]
		if dsn == "" {
			return conformance.Target{}, usageError("--adapter mysql needs --config dsn=user:password@tcp(host:3306)/")
		}
		srv, err := scratch.FromDSN(dsn, "dsn")
		if err != nil {
			return conformance.Target{}, exitError{Code: exitHarness, Msg: fmt.Sprintf("mysql server: %v", err)}
		}
		return mysqltest.Target(srv, !o.realClock), nil
	case "postgres":
		dsn := o.config["dsn"]
		if dsn == "" {
			return conformance.Target{}, usageError("--adapter postgres needs --config dsn=postgres://user:password@host:5432/database")
		}
		srv, err := pgscratch.FromDSN(dsn, "dsn")
		if err != nil {
			return conformance.Target{}, exitError{Code: exitHarness, Msg: fmt.Sprintf("postgres server: %v", err)}
		}
		return pgtest.Target(srv, !o.realClock), nil
	case "etcd":
		endpoints := o.config["endpoints"]
		if endpoints == "" {
			return conformance.Target{}, usageError("--adapter etcd needs --config endpoints=host:2379[,host:2379…]")
		}
		return etcdtest.Target(strings.Split(endpoints, ","), !o.realClock, nil), nil
	}
	return memorytest.Target(!o.realClock), nil
}

// pluginTarget starts the plugin once to learn what it declares, then
// returns a target that starts it afresh for every check.
func (o options) pluginTarget(ctx context.Context) (conformance.Target, error) {
	if _, err := os.Stat(o.pluginPath); err != nil {
		return conformance.Target{}, usageError("--plugin: %v", err)
	}
	config := templated(o.config)
	// Described once without a proxy: the plugin reaches its backend itself.
	direct := maps.Clone(o.config)
	for k, v := range direct {
		direct[k] = strings.ReplaceAll(v, plugintest.ProxyPlaceholder, o.proxyBackend)
	}
	d, err := plugintest.DescribeStore(ctx, o.pluginPath, templated(direct))
	if errors.Is(err, runstate.ErrInvalidArgument) {
		return conformance.Target{}, usageError("the plugin refused its --config: %v", err)
	} else if err != nil {
		return conformance.Target{}, exitError{Code: exitHarness, Msg: fmt.Sprintf("the plugin did not start: %v", err)}
	}
	caps := conformance.Capabilities{Leases: d.Leases, ControlledClock: d.TestClock && !o.realClock, SecondHandle: o.secondProcess}
	if o.killPlugin {
		caps.Faults = []conformance.Fault{conformance.FaultRestart}
	}
	if o.proxyBackend != "" {
		caps.Faults = append(caps.Faults, faultproxy.Faults...)
	}
	return plugintest.ProcessTargetWith(plugintest.ProcessParams{Name: d.Name, Version: d.Version, Path: o.pluginPath, Caps: caps, Config: config,
		Backend: o.proxyBackend}), nil
}

// checkProxyBackend refuses a --proxy-backend that no fault would reach
// through: without a plugin, or a --config value that names {{proxy}}.
func (o *options) checkProxyBackend() error {
	if o.proxyBackend == "" {
		return nil
	}
	if o.pluginPath == "" {
		return usageError("--proxy-backend goes with --plugin: it puts a fault proxy between a plugin and its own server")
	}
	if _, _, err := net.SplitHostPort(o.proxyBackend); err != nil {
		return usageError("--proxy-backend %q: want HOST:PORT of the plugin's server: %v", o.proxyBackend, err)
	}
	for _, v := range o.config {
		if strings.Contains(v, plugintest.ProxyPlaceholder) {
			return nil
		}
	}
	return usageError("--proxy-backend %s: no --config value names %s, so the plugin would reach its server directly and no fault would reach it; "+
		"put %s where the server's address goes, e.g. --config 'dsn=postgres://user@%s/db'", o.proxyBackend, plugintest.ProxyPlaceholder, plugintest.ProxyPlaceholder, plugintest.ProxyPlaceholder)
}

// gatewayTarget starts the gateway binary afresh for every check, without
// TLS on loopback, in front of the store --store (or --config store=)
// names.
func (o options) gatewayTarget(ctx context.Context) (conformance.Target, func(), error) {
	none := func() {}
	if _, err := os.Stat(o.gatewayPath); err != nil {
		return conformance.Target{}, none, usageError("--gateway: %v", err)
	}
	for k := range o.config {
		if k != "store" {
			return conformance.Target{}, none, usageError("--config %s: a gateway target takes only store=…", k)
		}
	}
	dir, err := os.MkdirTemp("", "runstate-gateway-conformance-*")
	if err != nil {
		return conformance.Target{}, none, err
	}
	removeDir := func() { os.RemoveAll(dir) }
	setup, err := gatewaytest.Plaintext(o.gatewayPath, dir)
	if err != nil {
		removeDir()
		return conformance.Target{}, none, err
	}
	// A store that outlives the gateway is killed with it for the FAULT
	// rules; one that reads the gateway's test clock is on it.
	setup.Restart = gatewaytest.Outlives(o.config["store"])
	setup.TestClock = !o.realClock && gateway.CheckTestClock(o.config["store"]) == nil
	config := templated(o.config)
	if setup.TestClock {
		// A gateway built before test mode keeps real time, as a plugin
		// whose store does not read the test clock: the clock rules skip.
		info, err := describeGateway(ctx, setup, config)
		if err != nil {
			removeDir()
			return conformance.Target{}, none, exitError{Code: exitHarness, Msg: fmt.Sprintf("the gateway did not start: %v", err)}
		}
		setup.TestClock = info.TestClock
	}
	kind := stores.Parse(o.config["store"]).Scheme
	return gatewaytest.ProcessTarget(kind, setup, func(ctx context.Context) (string, func(), error) {
		cfg, cleanup, err := config(ctx)
		return cfg["store"], cleanup, err
	}), removeDir, nil
}

// describeGateway starts the gateway once, as setup starts it, in front of
// a store of its own, and returns what it says of itself.
func describeGateway(ctx context.Context, setup gatewaytest.Setup, config plugintest.Config) (protocol.StoreInfo, error) {
	cfg, cleanup, err := config(ctx)
	if err != nil {
		return protocol.StoreInfo{}, err
	}
	defer cleanup()
	return gatewaytest.Describe(ctx, setup, cfg["store"])
}

// templated expands {{tempdir}} and {{unique}} in config values afresh for
// every check; the directory is removed after the check.
func templated(config map[string]string) plugintest.Config {
	return func(context.Context) (map[string]string, func(), error) {
		out := maps.Clone(config)
		var dir string
		b := make([]byte, 8)
		rand.Read(b)
		unique := hex.EncodeToString(b)
		for k, v := range out {
			if strings.Contains(v, "{{tempdir}}") && dir == "" {
				d, err := os.MkdirTemp("", "runstate-conformance-*")
				if err != nil {
					return nil, nil, err
				}
				dir = d
			}
			out[k] = strings.NewReplacer("{{tempdir}}", dir, "{{unique}}", unique).Replace(v)
		}
		return out, func() {
			if dir != "" {
				os.RemoveAll(dir)
			}
		}, nil
	}
}

// reportedConfig is the configuration as reports show it: secret values
// redacted, and a gateway's store shown without a DSN's password.
func (o options) reportedConfig() map[string]string {
	out := plugin.Redacted(o.config, o.secret)
	if store, ok := o.config["store"]; ok && o.gatewayPath != "" && !slices.Contains(o.secret, "store") {
		out["store"] = stores.Redact(store)
	}
	return out
}
