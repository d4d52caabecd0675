package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/protocol"
	"github.com/spf13/cobra"
)

// exitNotCertified: nothing failed, but a selected profile is not
// certified, because the target lacks what some of its rules need.
const exitNotCertified = 4

const certifyLong = `certify runs every mode the target supports and prints one verdict per profile.

Modes (each a fresh store per check, as the root command):
  controlled-clock  every rule without a fault, the checks moving the store's clock (built-in
                    stores; catches times cut to milliseconds, the exact expiry boundary, a
                    lease judged by the worker's clock instead of the store's)
  real-clock        the same rules with real time and real lease TTLs (catches what does not
                    survive time passing: a cursor that skips runs sharing a created_at)
  faults            the FAULT rules under the partition, reset and delay faults the target
                    declares (catches calls that ignore their deadline, writes acknowledged
                    before they are committed)
  restarts          the FAULT rules under the restart faults the target declares: a plugin
                    with --kill-plugin, a cluster member or leader (catches acknowledged
                    writes lost, a handle that must be reopened)

Profiles:
  core    runs, status machine, versions, audit, listings, recovery, batches, bad input, context
  leases  leases, fencing, claims, the runnable listing, the controlled clock
  shared  many handles at once: LIN and a second handle
  watch   watching a run: a wake-up at each write (runstate.RunWatcher, optional)
  faults  faults at the backend
  scale   claim-next, the runnable listing and a deep ListRuns page timed on two stores, one
          holding --scale-small runs no claim may take, the other --scale-large; an operation
          whose time grows more than the square root of the growth (×10 for 100 times the
          runs) is flagged; a store that fails while measured (an error, a listing that
          ends early) fails it

A profile is certified when every rule in it passed in at least one mode and none failed or
broke in any; a rule that passed in no mode, because the target lacks a capability or an
optional interface, makes it "not certified (lacks …)", never certified.

Exit codes: 0 every selected profile certified, 1 a rule failed, scale flagged an operation or
the store failed while measured, 2 usage error or a store that holds runs, 3 the harness broke,
4 a selected profile is not certified because the target lacks what it needs (nothing failed).
The faults profile needs faults a plugin cannot declare (a failover, a member of a replicated
backend restarting), so certify a plugin with --profile naming the profiles it can prove.`

const certifyExample = `  conformance-runner certify
  conformance-runner certify --profile core,leases --format json
  conformance-runner certify --adapter badger --markdown certificate.md --junit certificate.xml
  conformance-runner certify --plugin ./runstate-plugin-badger --config dir={{tempdir}} --profile core,leases`

type certifyOptions struct {
	options
	profiles               listFlag
	scaleSmall, scaleLarge int
}

func newCertifyCommand() *cobra.Command {
	o := &certifyOptions{options: options{config: configFlag{}}}
	cmd := &cobra.Command{
		Use:     "certify",
		Short:   "Run every mode the target supports and print one verdict per profile",
		Long:    certifyLong,
		Example: certifyExample,
		Args:    cli.ExactArgs(),
		PreRunE: func(*cobra.Command, []string) error { return o.check() },
		RunE: func(c *cobra.Command, _ []string) error {
			return certifyProfiles(c.Context(), *o, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	addTargetFlags(fs, &o.options)
	addCheckFlags(fs, &o.options)
	fs.Var(&o.profiles, "profile", "profiles to certify, comma-separated: core, leases, shared, watch, parking, faults, scale (default all)")
	fs.IntVar(&o.scaleSmall, "scale-small", 100, "scale: runs no claim may take in the small store")
	fs.IntVar(&o.scaleLarge, "scale-large", 10000, "scale: runs no claim may take in the large store")
	fs.StringVar(&o.attachments, "attachments", "", "directory for files that explain failures, one subdirectory per mode (default: beside --markdown or --junit)")
	cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *certifyOptions) check() error {
	if _, err := conformance.SelectProfiles(o.profiles); err != nil {
		return usageError("--profile: %v", err)
	}
	if o.scaleSmall < 1 || o.scaleLarge <= o.scaleSmall {
		return usageError("--scale-small %d and --scale-large %d: want 1 or more, and more in the large store", o.scaleSmall, o.scaleLarge)
	}
	return o.options.check()
}

// certificate is the verdict of a certification, in every format.
type certificate struct {
	Suite string `json:"suite_version"`
	// Kit and Protocol are the certifying host's: the kit's version of
	// this binary and the wire protocol's version it speaks.
	Kit          string `json:"kit_version"`
	Protocol     string `json:"protocol_version"`
	Target       string `json:"target"`
	StoreVersion string `json:"target_version"`
	// TargetProtocol, for a plugin or a gateway, is what its server
	// announced when opened; nil for a store in this process.
	TargetProtocol *targetProtocol              `json:"target_protocol,omitempty"`
	Capabilities   conformance.Capabilities     `json:"capabilities"`
	Config         map[string]string            `json:"config,omitempty"`
	Environment    map[string]string            `json:"environment"`
	Started        time.Time                    `json:"started"`
	Duration       time.Duration                `json:"-"` // duration_seconds in JSON
	Modes          []modeReport                 `json:"modes"`
	NotRun         []modeNotRun                 `json:"modes_not_run,omitempty"`
	Profiles       []conformance.ProfileVerdict `json:"profiles"`
}

func (c certificate) MarshalJSON() ([]byte, error) {
	type fields certificate
	return json.Marshal(struct {
		fields
		DurationSeconds float64 `json:"duration_seconds"`
	}{fields(c), c.Duration.Seconds()})
}

// modeReport is one mode: what the target declared in it, and each rule's result.
type modeReport struct {
	Mode         string                      `json:"mode"`
	Capabilities conformance.Capabilities    `json:"capabilities"`
	Counts       map[conformance.Outcome]int `json:"counts"`
	Results      []conformance.Result        `json:"results"`
}

// targetProtocol is the protocol a plugin's or a gateway's server
// announced when opened.
type targetProtocol struct {
	// Version is the server's, MAJOR.MINOR, or "1.5 or older" from a
	// server that predates version numbers in Open.
	Version string `json:"version"`
	// Features are the features it named (protocol.Feature*).
	Features []string `json:"features"`
}

// announcer is a harness whose store is reached through a server of the
// wire protocol: a plugin process's (plugintest) or a gateway's
// (gatewaytest).
type announcer interface {
	// Announced is what the server said of its store when opened.
	Announced() protocol.StoreInfo
}

// announcedProtocol opens one harness of target, as a check would, and
// returns the protocol its server announced; nil for a harness that
// reaches its store through none.
func announcedProtocol(ctx context.Context, target conformance.Target) (*targetProtocol, error) {
	h, err := target.NewHarness(ctx)
	if err != nil {
		return nil, err
	}
	defer h.Close(ctx)
	a, ok := h.(announcer)
	if !ok {
		return nil, nil
	}
	info := a.Announced()
	return &targetProtocol{Version: info.Speaks(), Features: slices.Clone(info.Features)}, nil
}

type modeNotRun struct {
	Mode string `json:"mode"`
	Why  string `json:"why"`
}

// certifyMode is a mode to run: the target as the mode configures it and
// the rules it runs.
type certifyMode struct {
	name   string
	target conformance.Target
	rules  []conformance.Rule
}

// certifyProfiles runs every mode the target supports, measures scale when
// selected, and reports one verdict per profile.
func certifyProfiles(ctx context.Context, o certifyOptions, stdout, stderr io.Writer) error {
	selected, err := conformance.SelectProfiles(o.profiles)
	if err != nil {
		return usageError("--profile: %v", err)
	}
	controlled, real, cleanup, err := o.clockTargets(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	return o.certifyPlan(ctx, planModes(controlled, real, selected), selected, stdout, stderr)
}

// certifyPlan runs the plan's modes, measures scale when selected, and
// writes the certificate.
func (o certifyOptions) certifyPlan(ctx context.Context, p plan, selected []conformance.Profile, stdout, stderr io.Writer) error {
	if err := o.refuseStoredRuns(ctx, p.base); err != nil {
		return err
	}
	cert := certificate{Suite: conformance.Version, Kit: buildinfo.Version(), Protocol: protocol.Version,
		Target: p.base.Name, StoreVersion: p.base.StoreVersion,
		Capabilities: p.base.Capabilities, Config: o.reportedConfig(), Environment: environment(),
		Started: time.Now().UTC(), NotRun: p.notRun}
	if o.pluginPath != "" || o.gatewayPath != "" {
		announced, err := announcedProtocol(ctx, p.base)
		if err != nil {
			return exitError{Code: exitHarness, Msg: fmt.Sprintf("cannot open the target to read the protocol it announces: %v", err)}
		}
		cert.TargetProtocol = announced
	}
	var runs []conformance.ModeResults
	for _, m := range p.modes {
		fmt.Fprintf(stderr, "%s: %d rules, capabilities %s\n", m.name, len(m.rules), m.target.Capabilities)
		results := conformance.RunRules(ctx, m.target, m.rules, func(r conformance.Result) {
			fmt.Fprintf(stderr, "%-5s %-10s %-16s %v\n", strings.ToUpper(string(r.Outcome)), r.Rule.ID, m.name, r.Duration.Round(time.Millisecond))
		})
		runs = append(runs, conformance.ModeResults{Mode: m.name, Capabilities: m.target.Capabilities, Results: results})
		cert.Modes = append(cert.Modes, modeReport{Mode: m.name, Capabilities: m.target.Capabilities, Counts: tally(results), Results: results})
	}
	var scale []conformance.ScaleMeasurement
	var scaleErr error
	if slices.ContainsFunc(selected, func(p conformance.Profile) bool { return p.ID == conformance.ProfileScale }) {
		scale, scaleErr = conformance.MeasureScale(ctx, p.base, conformance.ScaleOptions{Small: o.scaleSmall, Large: o.scaleLarge,
			Progress: func(s string) { fmt.Fprintln(stderr, s) }})
	}
	cert.Profiles = conformance.Verdicts(selected, runs, scale)
	// A store that failed while measured is judged failed from its
	// measurement; any other error left scale unmeasured: the harness broke.
	if errors.As(scaleErr, new(*conformance.ScaleFailure)) {
		scaleErr = nil
	}
	if scaleErr != nil {
		for i := range cert.Profiles {
			if cert.Profiles[i].Profile == conformance.ProfileScale {
				cert.Profiles[i].Verdict = fmt.Sprintf("%s (not measured: %v)", conformance.NotCertified, scaleErr)
			}
		}
	}
	cert.Duration = time.Since(cert.Started)
	if err := o.writeCertificate(stdout, cert); err != nil {
		return exitError{Code: exitHarness, Msg: err.Error()}
	}
	return certificateExit(cert, scaleErr)
}

// certificateExit is the exit code of a certificate: a failure first, then
// a broken harness (scaleErr: scale could not be measured), then a
// profile not certified.
func certificateExit(cert certificate, scaleErr error) error {
	var broke, failed, uncertified bool
	for _, m := range cert.Modes {
		broke = broke || m.Counts[conformance.Error] > 0
		failed = failed || m.Counts[conformance.Fail] > 0
	}
	for _, v := range cert.Profiles {
		failed = failed || (v.Profile == conformance.ProfileScale && v.Status == conformance.Failed)
		uncertified = uncertified || v.Status != conformance.Certified
	}
	switch {
	case failed:
		return exitError{Code: exitFail}
	case scaleErr != nil:
		return exitError{Code: exitHarness, Msg: scaleErr.Error()}
	case broke:
		return exitError{Code: exitHarness}
	case uncertified:
		return exitError{Code: exitNotCertified}
	}
	return nil
}

// plan is what a certification runs: the modes with their targets and
// rules, the modes it does not run and why, and the base target, which
// scale is measured on and the reports name: the controlled-clock one
// when there is one.
type plan struct {
	modes  []certifyMode
	notRun []modeNotRun
	base   conformance.Target
}

// clockTargets builds the target the options name with a controlled clock
// where the target has one, and with the real clock; they are the same
// target when it has only one form.
func (o certifyOptions) clockTargets(ctx context.Context) (controlled, real conformance.Target, cleanup func(), err error) {
	var cleanups []func()
	cleanup = func() {
		for _, c := range cleanups {
			c()
		}
	}
	build := func(realClock bool) (conformance.Target, error) {
		opts := o.options
		opts.realClock = realClock
		t, done, err := opts.target(ctx)
		cleanups = append(cleanups, done)
		opts.applyCheckFlags(&t)
		return t, err
	}
	if controlled, err = build(false); err != nil || !controlled.Capabilities.ControlledClock {
		return controlled, controlled, cleanup, err
	}
	real, err = build(true)
	return controlled, real, cleanup, err
}

// planModes plans every mode the selected profiles need and the targets
// support: rules needing no fault in the controlled-clock and real-clock
// modes, rules needing one in the faults and restarts modes.
func planModes(controlled, real conformance.Target, selected []conformance.Profile) plan {
	p := plan{base: controlled}
	var plain, faulty []conformance.Rule
	for _, prof := range selected {
		for _, r := range conformance.ProfileRules(prof.ID) {
			if len(r.Requires.Faults) > 0 {
				faulty = append(faulty, r)
			} else {
				plain = append(plain, r)
			}
		}
	}
	add := func(name string, t conformance.Target, rules []conformance.Rule, why string) {
		switch {
		case len(rules) == 0:
			p.notRun = append(p.notRun, modeNotRun{name, "no rule of the selected profiles runs in it"})
		case why != "":
			p.notRun = append(p.notRun, modeNotRun{name, why})
		default:
			p.modes = append(p.modes, certifyMode{name, t, rules})
		}
	}
	withFaults := func(t conformance.Target, keep func(conformance.Fault) bool) conformance.Target {
		t.Capabilities.Faults = slices.DeleteFunc(slices.Clone(t.Capabilities.Faults), func(f conformance.Fault) bool { return !keep(f) })
		return t
	}
	noFaults := func(conformance.Fault) bool { return false }
	add("controlled-clock", withFaults(controlled, noFaults), plain, cond(!controlled.Capabilities.ControlledClock, "the target has no controlled clock"))
	add("real-clock", withFaults(real, noFaults), plain, cond(real.Capabilities.ControlledClock, "the target has no real-clock form"))
	// The faults mode runs even when the target declares no fault, so that
	// each FAULT rule skips saying which fault it needs.
	add("faults", withFaults(p.base, func(f conformance.Fault) bool { return !isRestart(f) }), faulty, "")
	restarts := withFaults(p.base, isRestart)
	add("restarts", restarts, faulty, cond(len(restarts.Capabilities.Faults) == 0, "the target declares no restart fault (a plugin: --kill-plugin)"))
	return p
}

func isRestart(f conformance.Fault) bool {
	return f == conformance.FaultRestart || f == conformance.FaultMemberRestart || f == conformance.FaultLeaderRestart
}

// cond is why when c holds, else "".
func cond(c bool, why string) string {
	if c {
		return why
	}
	return ""
}

// refuseStoredRuns refuses a store that holds runs, as the root command does.
func (o certifyOptions) refuseStoredRuns(ctx context.Context, target conformance.Target) error {
	if o.allowStoredRuns {
		return nil
	}
	if err := conformance.CheckEmpty(ctx, target); errors.Is(err, conformance.ErrStoreNotEmpty) {
		return usageError("refusing to certify %s: %v; checks need an empty store: point it at a scratch place, or pass --allow-stored-runs", target.Name, err)
	} else if err != nil {
		return exitError{Code: exitHarness, Msg: fmt.Sprintf("cannot see whether the store is empty: %v", err)}
	}
	return nil
}

// writeCertificate writes the certificate to stdout and to the --junit and
// --markdown files, and each mode's attachments to its own directory.
func (o certifyOptions) writeCertificate(stdout io.Writer, cert certificate) error {
	for i := range cert.Modes {
		mo := o.options
		if dir := attachmentsDir(o.options); dir != "" {
			mo.attachments = filepath.Join(dir, cert.Modes[i].Mode)
		}
		if err := writeAttachments(mo, cert.Modes[i].Results); err != nil {
			return err
		}
	}
	if o.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cert); err != nil {
			return err
		}
	} else {
		writeCertificateText(stdout, cert)
	}
	for path, write := range map[string]func(io.Writer) error{
		o.junit:    func(w io.Writer) error { return writeCertificateJUnit(w, cert) },
		o.markdown: func(w io.Writer) error { writeCertificateMarkdown(w, cert); return nil },
	} {
		if path == "" {
			continue
		}
		if err := writeFile(path, write); err != nil {
			return err
		}
	}
	return nil
}

// attachmentsDir is where attachments go: --attachments, or beside the
// Markdown or JUnit report; "" when nowhere.
func attachmentsDir(o options) string {
	if o.attachments != "" {
		return o.attachments
	}
	for _, report := range []string{o.markdown, o.junit} {
		if report != "" {
			return filepath.Dir(report)
		}
	}
	return ""
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// versionsLine names the kit and protocol versions of the certifying
// host and, for a plugin or a gateway, the protocol its server announced.
func (c certificate) versionsLine() string {
	line := fmt.Sprintf("kit %s, protocol %s", c.Kit, c.Protocol)
	if t := c.TargetProtocol; t != nil {
		line += fmt.Sprintf("; the target announced protocol %s with features: %s", t.Version, t.featuresList())
	}
	return line
}

// featuresList lists the features, or says there are none.
func (t targetProtocol) featuresList() string {
	if len(t.Features) == 0 {
		return "none"
	}
	return strings.Join(t.Features, ", ")
}

// modesLine says which modes ran and which did not, and why.
func (c certificate) modesLine() string {
	var parts []string
	for _, m := range c.Modes {
		parts = append(parts, fmt.Sprintf("%s (%d rules: %d pass, %d fail, %d skip, %d error)", m.Mode, len(m.Results),
			m.Counts[conformance.Pass], m.Counts[conformance.Fail], m.Counts[conformance.Skip], m.Counts[conformance.Error]))
	}
	for _, m := range c.NotRun {
		parts = append(parts, fmt.Sprintf("%s not run: %s", m.Mode, m.Why))
	}
	return strings.Join(parts, "; ")
}

func writeCertificateText(w io.Writer, c certificate) {
	fmt.Fprintf(w, "runstate certification %s: %s (%s)\nversions: %s\ncapabilities: %s\nmodes: %s\n\n", c.Suite, c.Target, c.StoreVersion, c.versionsLine(), c.Capabilities, c.modesLine())
	for _, v := range c.Profiles {
		fmt.Fprintf(w, "%-7s %s\n", v.Profile, v.Verdict)
		for _, f := range v.Failed {
			fmt.Fprintf(w, "  %s %s in %s: %s\n", strings.ToUpper(string(f.Outcome)), f.Rule, f.Mode, f.Detail)
		}
		for _, u := range v.Unproven {
			fmt.Fprintf(w, "  unproven %s in %s: %s\n", u.Rule, u.Mode, u.Detail)
		}
		for _, m := range v.Scale {
			fmt.Fprintf(w, "  %s\n", m)
		}
	}
	fmt.Fprintf(w, "\nin %v\n", c.Duration.Round(time.Millisecond))
}

func writeCertificateMarkdown(w io.Writer, c certificate) {
	fmt.Fprintf(w, "# runstate certificate: %s\n\n| | |\n| --- | --- |\n", c.Target)
	fmt.Fprintf(w, "| suite | %s |\n| kit | %s |\n| protocol | %s |\n| target | %s |\n| target version | %s |\n", c.Suite, c.Kit, c.Protocol, c.Target, c.StoreVersion)
	if t := c.TargetProtocol; t != nil {
		fmt.Fprintf(w, "| target protocol | %s |\n| target features | %s |\n", t.Version, t.featuresList())
	}
	fmt.Fprintf(w, "| capabilities | %s |\n", c.Capabilities)
	for _, k := range sortedKeys(c.Config) {
		fmt.Fprintf(w, "| config %s | `%s` |\n", k, c.Config[k])
	}
	for _, k := range sortedKeys(c.Environment) {
		fmt.Fprintf(w, "| %s | %s |\n", k, c.Environment[k])
	}
	fmt.Fprintf(w, "| started | %s |\n| duration | %v |\n| modes | %s |\n\n", c.Started.Format(time.RFC3339), c.Duration.Round(time.Millisecond), c.modesLine())
	fmt.Fprintf(w, "| profile | verdict | rules proven |\n| --- | --- | --- |\n")
	for _, v := range c.Profiles {
		fmt.Fprintf(w, "| %s | %s | %s |\n", v.Profile, v.Verdict, strings.Join(v.Proven, " "))
	}
	for _, v := range c.Profiles {
		if len(v.Failed)+len(v.Unproven)+len(v.Skipped)+len(v.Scale) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## %s: %s\n\n", v.Profile, v.Verdict)
		for _, f := range v.Failed {
			fmt.Fprintf(w, "- %s **%s** in %s: %s\n", strings.ToUpper(string(f.Outcome)), f.Rule, f.Mode, f.Detail)
		}
		for _, m := range v.Scale {
			fmt.Fprintf(w, "- %s\n", m)
		}
		for _, mode := range sortedModes(v.Skipped) {
			fmt.Fprintf(w, "\nSkipped in %s:\n\n", mode)
			for _, s := range v.Skipped[mode] {
				fmt.Fprintf(w, "- %s: %s\n", s.Rule, s.Detail)
			}
		}
	}
}

func sortedModes(m map[string][]conformance.ModeOutcome) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// writeCertificateJUnit writes one testsuite per profile: a testcase per
// rule and mode, and one per scale measurement.
func writeCertificateJUnit(w io.Writer, c certificate) error {
	out := junitSuites{Name: "runstate certification " + c.Suite + ": " + c.Target, Time: c.Duration.Seconds()}
	out.Properties = []junitProperty{{"suite_version", c.Suite}, {"kit_version", c.Kit}, {"protocol_version", c.Protocol},
		{"target", c.Target}, {"target_version", c.StoreVersion}}
	if t := c.TargetProtocol; t != nil {
		out.Properties = append(out.Properties, junitProperty{"target_protocol_version", t.Version}, junitProperty{"target_features", strings.Join(t.Features, ",")})
	}
	out.Properties = append(out.Properties, junitProperty{"capabilities", c.Capabilities.String()}, junitProperty{"modes", c.modesLine()})
	for _, v := range c.Profiles {
		out.Properties = append(out.Properties, junitProperty{"profile." + v.Profile, v.Verdict})
		s := junitSuite{Name: v.Profile}
		for _, m := range c.Modes {
			for _, res := range m.Results {
				if conformance.ProfileOf(res.Rule) != v.Profile {
					continue
				}
				tc := junitCase{Name: res.Rule.ID + " [" + m.Mode + "] " + res.Rule.Statement, Classname: "runstate." + v.Profile + "." + m.Mode, Time: res.Duration.Seconds()}
				msg := &junitMessage{Message: res.Detail, Body: res.Rule.URL}
				for _, f := range res.Failures {
					msg.Body += "\n" + f.String()
				}
				switch res.Outcome {
				case conformance.Fail:
					tc.Failure, s.Failures = msg, s.Failures+1
				case conformance.Error:
					tc.Error, s.Errors = msg, s.Errors+1
				case conformance.Skip:
					tc.Skipped, s.Skipped = msg, s.Skipped+1
				}
				s.Cases = append(s.Cases, tc)
			}
		}
		for _, m := range v.Scale {
			tc := junitCase{Name: "scale " + m.Operation, Classname: "runstate.scale", Time: m.SmallSeconds + m.LargeSeconds}
			switch {
			case m.Failed != "":
				tc.Failure, s.Failures = &junitMessage{Message: m.String()}, s.Failures+1
			case m.Skipped != "":
				tc.Skipped, s.Skipped = &junitMessage{Message: m.Skipped}, s.Skipped+1
			case m.Flagged:
				tc.Failure, s.Failures = &junitMessage{Message: m.String()}, s.Failures+1
			}
			s.Cases = append(s.Cases, tc)
		}
		s.Tests = len(s.Cases)
		out.Tests, out.Failures, out.Errors, out.Skipped = out.Tests+s.Tests, out.Failures+s.Failures, out.Errors+s.Errors, out.Skipped+s.Skipped
		out.Suites = append(out.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(out)
}
