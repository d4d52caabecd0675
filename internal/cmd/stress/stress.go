package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/runstate/runstate/internal/cli"
)

// Exit codes.
const (
	exitFailed      = 1
	exitUsage       = 2
	exitCouldNotRun = 3
)

// target is one test of one package.
type target struct {
	pkg  string // as go test takes it: ./cmd/demo-runner
	test string // the top-level test's name
}

func (t target) String() string { return t.pkg + ":" + t.test }

// timeSensitive are the tests whose outcome depends on timing: real
// clocks, leases that lapse, processes killed, stopped and started
// again, servers failing over. Each has failed in CI under load at least
// once, or checks what such a failure would break.
var timeSensitive = []target{
	{"./cmd/demo-runner", "TestManyWorkersShareOneStoreUnderChaos"},
	{"./cmd/demo-runner", "TestAStalledWorkerNeverRunsAStepAnotherWorkerRuns"},
	{"./cmd/demo-runner", "TestAStalledWorkersCommandEndsBeforeAnotherWorkerRunsTheStep"},
	{"./cmd/demo-runner", "TestAWorkerCountsItsLateRenewalsAndLostLeases"},
	{"./cmd/demo-runner", "TestLiveWorkersSettleARunADeadWorkerLeftBehind"},
	{"./cmd/demo-runner", "TestTwoWorkersOnMySQLTakeOverWithFencing"},
	{"./cmd/demo-runner/internal/workflow", "TestTheSupervisorEndsACommandWhoseLeaseRunsOut"},
	// Parked runs: timers that come due on a real clock, and the stores'
	// alarms for them, which ring on their own goroutines.
	{"./cmd/demo-runner", "TestAWaitingRunHoldsNoSlot"},
	{"./cmd/demo-runner", "TestSleepingRunsOutliveTheWorkerThatParkedThem"},
	{"./adapters/badger", "TestADueRunWakesTheWatchers"},
	{"./adapters/badger", "TestAnAlarmAsTheStoreClosesReadsNothing"},
	{"./adapters/postgres", "TestADueRunWakesTheWatchers"},
	{"./adapters/memory", "TestConformanceRealClock"},
	{"./adapters/badger", "TestConformanceRealClock"},
	{"./adapters/mysql", "TestConformanceRealClock"},
	{"./adapters/postgres", "TestConformanceRealClock"},
	{"./adapters/etcd", "TestConformanceRealClock"},
	{"./adapters/etcd", "TestConformance"},
	{"./adapters/etcd", "TestConformanceWithAMemberDown"},
	{"./adapters/etcd", "TestQuorumLossFailsFastAndHeals"},
	{"./adapters/mysql", "TestConformanceAcrossRestarts"},
	{"./adapters/postgres", "TestConformanceAcrossRestarts"},
	{"./adapters/postgres", "TestConformanceAcrossFailovers"},
	{"./adapters/postgres", "TestFailoverRulesHoldOverTwentyFailovers"},
	{"./plugin", "TestConformanceMemoryPluginRealClock"},
	{"./plugin", "TestConformanceMySQLPlugin"},
	{"./plugin", "TestTheBadgerPluginServesItsStore"},
	{"./plugin", "TestThePostgresPluginServesItsStore"},
	{"./plugin", "TestTheEtcdPluginServesItsStore"},
	{"./gateway/gatewaytest", "TestConformanceMemoryBehindAGatewayOnATestClock"},
	{"./gateway/gatewaytest", "TestConformanceBadgerBehindAGatewayThatIsKilled"},
	{"./cmd/runstate-gateway", "TestConformanceThroughAGatewayProcess"},
	{"./cmd/runstate-gateway", "TestWorkersCarryOnThroughAGatewayRestart"},
	{"./cmd/runstate-gateway", "TestAStalledWorkerIsFencedThroughTheGateway"},
}

type options struct {
	n       int           // runs of each test; 0: as many as fit in budget
	budget  time.Duration // time for each test's runs when n is 0
	pkgs    []string      // only these packages' tests (empty: all)
	run     *regexp.Regexp
	burn    bool
	keep    bool // keep the logs of runs that passed too
	out     string
	timeout time.Duration // one run's -test.timeout
	targets []target
}

const usage = `usage: stress [flags] [PKG:TEST ...]

Runs each time-sensitive test (or each PKG:TEST given) several times, with
-race, CI=true and a CPU burner on every core, and prints each one's
failure rate. The log of every failed run is kept in -out.

`

func parseArgs(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	o := options{}
	var pkgs, run string
	fs.IntVar(&o.n, "n", 0, "runs of each test (0: as many as fit in -budget, at least one)")
	fs.DurationVar(&o.budget, "budget", 3*time.Minute, "time for each test's runs when -n is 0")
	fs.StringVar(&pkgs, "pkgs", "", "only the tests of these packages, comma-separated (./cmd/demo-runner,./plugin)")
	fs.StringVar(&run, "run", "", "only the tests whose name matches this regular expression")
	fs.BoolVar(&o.burn, "burn", true, "keep every core busy with a CPU burner while the tests run")
	fs.BoolVar(&o.keep, "keep", false, "keep the log of every run, not only of those that failed")
	fs.StringVar(&o.out, "out", filepath.Join(os.TempDir(), "runstate-stress"), "where test binaries and failed runs' logs go")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "one run's -test.timeout")
	if err := cli.Parse(fs, args, 0, exitUsage); err != nil {
		return o, err
	}
	if o.n < 0 || o.budget <= 0 || o.timeout <= 0 {
		return o, cli.Errorf(exitUsage, "-n must be 0 or more, -budget and -timeout positive")
	}
	if run != "" {
		re, err := regexp.Compile(run)
		if err != nil {
			return o, cli.Errorf(exitUsage, "-run: %v", err)
		}
		o.run = re
	}
	for _, p := range strings.Split(pkgs, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.pkgs = append(o.pkgs, "./"+strings.TrimPrefix(filepath.Clean(p), "./"))
		}
	}
	o.targets = timeSensitive
	if fs.NArg() > 0 {
		o.targets = nil
		for _, a := range fs.Args() {
			pkg, test, ok := strings.Cut(a, ":")
			if !ok || pkg == "" || test == "" {
				return o, cli.Errorf(exitUsage, "%q: want PKG:TEST, such as ./cmd/demo-runner:TestManyWorkersShareOneStoreUnderChaos", a)
			}
			o.targets = append(o.targets, target{pkg: "./" + strings.TrimPrefix(filepath.Clean(pkg), "./"), test: test})
		}
	}
	o.targets = slices.DeleteFunc(slices.Clone(o.targets), func(t target) bool {
		return (len(o.pkgs) > 0 && !slices.Contains(o.pkgs, t.pkg)) || (o.run != nil && !o.run.MatchString(t.test))
	})
	if len(o.targets) == 0 {
		return o, cli.Errorf(exitUsage, "no test is selected: -pkgs and -run match none of the time-sensitive tests (%s)", names(timeSensitive))
	}
	return o, nil
}

func names(ts []target) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.String())
	}
	return strings.Join(s, ", ")
}

// result is what the runs of one test came to.
type result struct {
	target
	planned   int
	durations []time.Duration
	failed    []string // the failed runs' log files
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(o.out, "bin"), 0o755); err != nil {
		return err
	}
	bins, dirs, err := build(ctx, o, stderr)
	if err != nil {
		return err
	}
	reaping, stopReaping := context.WithCancel(ctx)
	defer stopReaping()
	fam, err := adopt(reaping)
	if err != nil {
		return err
	}
	if o.burn {
		stop, err := burn(fam, runtime.NumCPU())
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintf(stderr, "stress: a CPU burner runs on each of %d cores\n", runtime.NumCPU())
	}
	results := make([]*result, len(o.targets))
	for i, t := range o.targets {
		results[i] = &result{target: t, planned: max(o.n, 1)}
	}
	// Round by round, so that each test meets the machine in every state
	// the others leave it in.
	for round := 0; ; round++ {
		ran := false
		for _, r := range results {
			if round >= r.planned || ctx.Err() != nil {
				continue
			}
			ran = true
			logPath := filepath.Join(o.out, fmt.Sprintf("%s-%s-%d.log", strings.ReplaceAll(strings.Trim(r.pkg, "./"), "/", "_"),
				strings.ReplaceAll(r.test, "/", "_"), round+1))
			start := time.Now()
			passed, err := runOnce(ctx, fam, bins[r.pkg], dirs[r.pkg], r.test, o.timeout, logPath, o.keep)
			// Whatever the run left (a fleet, plugins, servers) ends with
			// it, so the next run meets a machine as loaded as this one did.
			fam.endOrphans()
			if err != nil {
				return err
			}
			d := time.Since(start)
			r.durations = append(r.durations, d)
			if o.n == 0 && round == 0 {
				r.planned = max(1, int(o.budget/d))
			}
			verdict := "ok"
			if !passed {
				r.failed = append(r.failed, logPath)
				verdict = "FAILED, log: " + logPath
			}
			fmt.Fprintf(stderr, "stress: %s run %d of %d: %s in %v\n", r.target, round+1, r.planned, verdict, d.Round(time.Second))
		}
		if !ran {
			break
		}
	}
	report(stdout, results)
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, r := range results {
		if len(r.failed) > 0 {
			return cli.ExitError{Code: exitFailed}
		}
	}
	return nil
}

// build compiles each package's test binary once, with -race, and finds
// the directory each runs in (a test reads files beside it).
func build(ctx context.Context, o options, stderr io.Writer) (bins, dirs map[string]string, err error) {
	bins, dirs = map[string]string{}, map[string]string{}
	for _, t := range o.targets {
		if bins[t.pkg] != "" {
			continue
		}
		bin := filepath.Join(o.out, "bin", strings.ReplaceAll(strings.Trim(t.pkg, "./"), "/", "_")+".test")
		fmt.Fprintf(stderr, "stress: building %s\n", t.pkg)
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-race", "-o", bin, t.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, nil, cli.Errorf(exitCouldNotRun, "go test -c %s: %v\n%s", t.pkg, err, out)
		}
		dir, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", t.pkg).Output()
		if err != nil {
			return nil, nil, cli.Errorf(exitCouldNotRun, "go list %s: %v", t.pkg, err)
		}
		bins[t.pkg], dirs[t.pkg] = bin, strings.TrimSpace(string(dir))
	}
	return bins, dirs, nil
}

// runOnce runs one test once, as CI would (CI=true: a test that needs a
// server fails rather than skips), and keeps its output at logPath when
// it fails.
func runOnce(ctx context.Context, fam *family, bin, dir, test string, timeout time.Duration, logPath string, keep bool) (bool, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return false, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^"+regexp.QuoteMeta(test)+"$", "-test.count", "1",
		"-test.v", "-test.timeout", timeout.String())
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, f, f
	cmd.Env = append(os.Environ(), "CI=true")
	// The test's own servers and workers go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err = fam.start(cmd); err == nil {
		err = fam.wait(cmd)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what is left of its group
	}
	var exit *exec.ExitError
	switch {
	case err == nil && keep:
		return true, nil
	case err == nil:
		f.Close()
		return true, os.Remove(logPath)
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.As(err, &exit):
		return false, nil
	}
	return false, err
}

// burn starts one busy process per core, each in a group of its own and
// killed with this process however it ends, and returns what stops them.
func burn(fam *family, n int) (stop func(), err error) {
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			fam.wait(p)
		}
	}
	for range n {
		p := exec.Command("sh", "-c", "while :; do :; done")
		p.SysProcAttr = burnerAttrs()
		if err := fam.start(p); err != nil {
			stop()
			return nil, err
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// report prints each test's runs, failures and median run time.
func report(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "package\ttest\truns\tfailed\trate\tmedian")
	for _, r := range results {
		rate := "-"
		if n := len(r.durations); n > 0 {
			rate = fmt.Sprintf("%.0f%%", 100*float64(len(r.failed))/float64(n))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.pkg, r.test, len(r.durations), len(r.failed), rate, median(r.durations))
	}
	tw.Flush()
	for _, r := range results {
		for _, l := range r.failed {
			fmt.Fprintf(w, "failed: %s: %s\n", r.target, l)
		}
	}
}

func median(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Second).String()
}
