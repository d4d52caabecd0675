package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/internal/rulecov"
	"github.com/runstate/runstate/protocol"
)

// certificateJSON is the JSON certificate as a reader sees it.
type certificateJSON struct {
	Suite          string                   `json:"suite_version"`
	Kit            string                   `json:"kit_version"`
	Protocol       string                   `json:"protocol_version"`
	TargetProtocol *targetProtocol          `json:"target_protocol"`
	Target         string                   `json:"target"`
	StoreVersion   string                   `json:"target_version"`
	Capabilities   conformance.Capabilities `json:"capabilities"`
	Duration       float64                  `json:"duration_seconds"`
	Modes          []struct {
		Mode         string                      `json:"mode"`
		Capabilities conformance.Capabilities    `json:"capabilities"`
		Counts       map[conformance.Outcome]int `json:"counts"`
		Results      []json.RawMessage           `json:"results"`
	} `json:"modes"`
	NotRun   []modeNotRun                 `json:"modes_not_run"`
	Profiles []conformance.ProfileVerdict `json:"profiles"`
}

func decodeCertificate(t *testing.T, out string) certificateJSON {
	t.Helper()
	var c certificateJSON
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("stdout is not a JSON certificate: %v\n%s", err, out)
	}
	return c
}

func verdictOf(t *testing.T, c certificateJSON, profile string) conformance.ProfileVerdict {
	t.Helper()
	for _, v := range c.Profiles {
		if v.Profile == profile {
			return v
		}
	}
	t.Fatalf("no verdict for profile %s in %+v", profile, c.Profiles)
	return conformance.ProfileVerdict{}
}

// The help example, as written, certifies the memory store's core and
// leases profiles in both clock modes, and every report says so.
func TestCertifyMemoryCoreAndLeases(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	dir := t.TempDir()
	junit, markdown := filepath.Join(dir, "cert.xml"), filepath.Join(dir, "cert.md")
	out, errOut, code := runCLI(t, "certify", "--profile", "core,leases", "--format", "json", "--junit", junit, "--markdown", markdown)
	if code != exitPass {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	rulecov.LogRunner(t, rulecov.PathRunner, "", []byte(out))
	c := decodeCertificate(t, out)
	if c.Suite != conformance.Version || c.Target != "memory" || c.StoreVersion != "builtin" || !c.Capabilities.Leases || !c.Capabilities.ControlledClock || c.Duration <= 0 {
		t.Errorf("stamp: %+v", c)
	}
	// The host's versions; a store in this process announces no protocol.
	if c.Kit != buildinfo.Version() || c.Protocol != protocol.Version || c.TargetProtocol != nil {
		t.Errorf("versions: kit %q, protocol %q, target protocol %+v; want %q, %q and none", c.Kit, c.Protocol, c.TargetProtocol, buildinfo.Version(), protocol.Version)
	}
	var modes []string
	for _, m := range c.Modes {
		modes = append(modes, m.Mode)
		if m.Counts[conformance.Fail]+m.Counts[conformance.Error] > 0 || len(m.Results) == 0 {
			t.Errorf("mode %s: %v over %d results", m.Mode, m.Counts, len(m.Results))
		}
	}
	if !slices.Equal(modes, []string{"controlled-clock", "real-clock"}) || c.Modes[1].Capabilities.ControlledClock {
		t.Errorf("modes run: %v, want controlled-clock then real-clock without the controlled clock", modes)
	}
	if len(c.NotRun) != 2 || c.NotRun[0].Mode != "faults" || c.NotRun[0].Why == "" {
		t.Errorf("modes not run: %+v, want faults and restarts, each with why", c.NotRun)
	}
	if len(c.Profiles) != 2 {
		t.Fatalf("profiles: %+v, want core and leases", c.Profiles)
	}
	for _, p := range []string{conformance.ProfileCore, conformance.ProfileLeases} {
		v := verdictOf(t, c, p)
		if v.Status != conformance.Certified || len(v.Proven) != len(conformance.ProfileRules(p)) || len(v.Unproven)+len(v.Failed) > 0 {
			t.Errorf("%s: %s, %d of %d rules proven", p, v.Verdict, len(v.Proven), len(conformance.ProfileRules(p)))
		}
	}
	// LEASE-018 needs the controlled clock: proven in that mode, and the
	// real-clock mode says it skipped it and why.
	leases := verdictOf(t, c, conformance.ProfileLeases)
	i := slices.IndexFunc(leases.Skipped["real-clock"], func(o conformance.ModeOutcome) bool { return o.Rule == "LEASE-018" })
	if i < 0 || !strings.Contains(leases.Skipped["real-clock"][i].Detail, "controlled_clock") {
		t.Errorf("leases skipped in real-clock: %+v, want LEASE-018 for the controlled clock", leases.Skipped["real-clock"])
	}

	var suites junitSuites
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		t.Fatal(err)
	}
	if len(suites.Suites) != 2 || suites.Failures+suites.Errors != 0 || !slices.Contains(suites.Properties, junitProperty{"suite_version", conformance.Version}) ||
		!slices.Contains(suites.Properties, junitProperty{"kit_version", buildinfo.Version()}) || !slices.Contains(suites.Properties, junitProperty{"protocol_version", protocol.Version}) {
		t.Errorf("junit: %d suites, %d failures, %d errors, properties %v", len(suites.Suites), suites.Failures, suites.Errors, suites.Properties)
	}
	md, err := os.ReadFile(markdown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| suite | " + conformance.Version, "| kit | " + buildinfo.Version() + " |", "| protocol | " + protocol.Version + " |",
		"| leases | certified (", "Skipped in real-clock:", "controlled-clock ("} {
		if !strings.Contains(string(md), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "target protocol") {
		t.Errorf("markdown names a target protocol for a store in this process:\n%s", md)
	}
}

// noLeases is the memory store with only runstate.RunStateStore: a store
// without leases, as a target that declares none.
func noLeases() conformance.Target {
	t := memoryWith(func(h conformance.Harness) conformance.Harness { return plainHarness{h} })
	t.Name, t.Capabilities.Leases = "memory without leases", false
	return t
}

// memoryWith is the memory store's target with each harness wrapped.
func memoryWith(wrap func(conformance.Harness) conformance.Harness) conformance.Target {
	t := memorytest.Target(true)
	newHarness := t.NewHarness
	t.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
		h, err := newHarness(ctx)
		if err != nil {
			return nil, err
		}
		return wrap(h), nil
	}
	return t
}

type plainHarness struct{ conformance.Harness }

type plainStore struct{ runstate.RunStateStore }

func (h plainHarness) Store() runstate.RunStateStore { return plainStore{h.Harness.Store()} }

func certifyTarget(t *testing.T, target conformance.Target, profiles ...string) (certificateJSON, int) {
	t.Helper()
	o := certifyOptions{options: options{format: "json"}, profiles: profiles, scaleSmall: 100, scaleLarge: 10000}
	selected, err := conformance.SelectProfiles(profiles)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = o.certifyPlan(context.Background(), planModes(target, target, selected), selected, &out, &errOut)
	return decodeCertificate(t, out.String()), exitCode(err)
}

// A target without leases is never certified for leases: every lease rule
// skips for the capability it lacks, and the verdict names it.
func TestCertifyTargetLackingLeases(t *testing.T) {
	c, code := certifyTarget(t, noLeases(), "leases")
	if code != exitNotCertified {
		t.Errorf("exit %d, want %d (not certified, nothing failed)", code, exitNotCertified)
	}
	v := verdictOf(t, c, conformance.ProfileLeases)
	if v.Status != conformance.NotCertified || !slices.Equal(v.Lacks, []string{"leases"}) || !strings.Contains(v.Verdict, "lacks leases") {
		t.Errorf("leases without leases: %s, lacks %v", v.Verdict, v.Lacks)
	}
	for _, r := range conformance.ProfileRules(conformance.ProfileLeases) {
		i := slices.IndexFunc(v.Unproven, func(o conformance.ModeOutcome) bool { return o.Rule == r.ID })
		if r.Requires.Leases && (i < 0 || v.Unproven[i].Detail != "needs capability leases") {
			t.Errorf("%s needs leases: want it unproven for that, got %+v", r.ID, v.Unproven)
		}
	}
}

// A rule that fails in a mode fails its profile, and certify exits 1.
func TestCertifyFailedProfileExits1(t *testing.T) {
	lying := memorytest.Target(true)
	lying.Capabilities.Leases = false // the store has leases: CAP-001 fails
	c, code := certifyTarget(t, lying, "core")
	if code != exitFail {
		t.Errorf("exit %d, want %d", code, exitFail)
	}
	v := verdictOf(t, c, conformance.ProfileCore)
	capFailed := slices.ContainsFunc(v.Failed, func(o conformance.ModeOutcome) bool { return o.Rule == "CAP-001" && o.Outcome == conformance.Fail })
	if v.Status != conformance.Failed || !capFailed || !strings.Contains(v.Verdict, "failed (") {
		t.Errorf("core with a false declaration: %s, failed %v", v.Verdict, v.Failed)
	}
}

func TestCertifyUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"certify", "--profile", "nope"},
		{"certify", "--scale-small", "0"},
		{"certify", "--scale-small", "100", "--scale-large", "100"},
		{"certify", "--adapter", "memory", "--plugin", "x"},
		{"certify", "--format", "yaml"},
		{"certify", "extra"},
	} {
		if _, errOut, code := runCLI(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d (%q), want %d with a message", args, code, errOut, exitUsage)
		}
	}
}

// The scale profile through the command line: three operations measured
// at both sizes, the verdict and the exit code agreeing with the flags,
// and each measurement a JUnit testcase.
func TestCertifyScaleReportsItsFigures(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "scale.xml")
	out, errOut, code := runCLI(t, "certify", "--profile", "scale", "--scale-small", "20", "--scale-large", "400", "--format", "json", "--junit", junit)
	c := decodeCertificate(t, out)
	v := verdictOf(t, c, conformance.ProfileScale)
	if len(v.Scale) != 3 {
		t.Fatalf("scale: %d measurements, want 3\n%s", len(v.Scale), errOut)
	}
	flagged := false
	for _, m := range v.Scale {
		if m.SmallRuns != 20 || m.LargeRuns != 400 || m.SmallSeconds <= 0 || m.LargeSeconds <= 0 || m.GetRunSeconds <= 0 || m.Bound != math.Sqrt(20) {
			t.Errorf("measurement without its figures: %+v", m)
		}
		flagged = flagged || m.Flagged
	}
	wantStatus, wantCode := conformance.Certified, exitPass
	if flagged {
		wantStatus, wantCode = conformance.Failed, exitFail
	}
	if v.Status != wantStatus || code != wantCode {
		t.Errorf("flagged %v: verdict %q, exit %d; want %s, exit %d", flagged, v.Verdict, code, wantStatus, wantCode)
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), `classname="runstate.scale"`); n != 3 {
		t.Errorf("junit: %d scale testcases, want 3", n)
	}
}

// A store that fails while measured fails the scale profile, exit 1, in
// every report: its broken listing is a failure, not a lack (exit 4) nor
// a broken harness (exit 3).
func TestCertifyScaleFailsABrokenListing(t *testing.T) {
	target := memoryWith(memorytest.WithoutNextPages)
	junit := filepath.Join(t.TempDir(), "scale.xml")
	o := certifyOptions{options: options{format: "json", junit: junit}, scaleSmall: 20, scaleLarge: 200}
	selected, _ := conformance.SelectProfiles([]string{"scale"})
	var out, errOut bytes.Buffer
	err := o.certifyPlan(context.Background(), planModes(target, target, selected), selected, &out, &errOut)
	v := verdictOf(t, decodeCertificate(t, out.String()), conformance.ProfileScale)
	if code := exitCode(err); code != exitFail {
		t.Errorf("exit %d, want %d (failed)", code, exitFail)
	}
	if v.Status != conformance.Failed || !strings.Contains(v.Verdict, "the store failed while measured: list-runs-deep") ||
		len(v.Scale) != 1 || v.Scale[0].Failed == "" {
		t.Errorf("scale of a broken listing: %q (%s), measurements %+v; want failed, naming the operation", v.Verdict, v.Status, v.Scale)
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `failures="1"`) || !strings.Contains(string(data), "list-runs-deep: FAILED") {
		t.Errorf("junit does not report the failure:\n%s", data)
	}
}

// Without leases, scale measures the deep page alone and is never
// certified: it lacks leases.
func TestCertifyScaleWithoutLeases(t *testing.T) {
	o := certifyOptions{options: options{format: "json"}, scaleSmall: 20, scaleLarge: 200}
	selected, _ := conformance.SelectProfiles([]string{"scale"})
	var out, errOut bytes.Buffer
	err := o.certifyPlan(context.Background(), planModes(noLeases(), noLeases(), selected), selected, &out, &errOut)
	v := verdictOf(t, decodeCertificate(t, out.String()), conformance.ProfileScale)
	if v.Status == conformance.Certified || !slices.Equal(v.Lacks, []string{"leases"}) || exitCode(err) == exitPass {
		t.Errorf("scale without leases: %s, lacks %v, exit %d", v.Verdict, v.Lacks, exitCode(err))
	}
	for _, m := range v.Scale {
		if measured := m.Skipped == ""; measured != (m.Operation == conformance.ScaleListRunsDeep) {
			t.Errorf("without leases only the deep page is measured: %+v", m)
		}
	}
}

// The integrator's case: the kit's store embedded in a struct of their own
// to add Close, served as a plugin, certifies core, its batch rules
// included (embedding once hid BatchCreator, and BATCH-001…003 skipped).
func TestAStoreEmbeddedInAStructOfItsOwnCertifiesCore(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "embedded")
	out, errOut, code := runCLI(t, "certify", "--plugin", bin(t, testPkg), "--profile", "core", "--format", "json")
	if code != exitPass {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	cert := decodeCertificate(t, out)
	core := verdictOf(t, cert, conformance.ProfileCore)
	for _, rule := range []string{"BATCH-001", "BATCH-002", "BATCH-003"} {
		if !slices.Contains(core.Proven, rule) {
			t.Errorf("%s not proven: %s (proven %v)", rule, core.Verdict, core.Proven)
		}
	}
	if announced := cert.TargetProtocol; announced == nil || !slices.Contains(announced.Features, protocol.FeatureBatchCreate) {
		t.Errorf("the plugin announced %+v, want batch_create among its features", announced)
	}
}

// A plugin or a gateway is certified with the protocol version and the
// features its server announced at Open, in every report.
func TestCertificatesStampTheProtocolVersionAndFeaturesATargetAnnounced(t *testing.T) {
	for _, target := range [][]string{{"--plugin", bin(t, memoryPkg)}, {"--gateway", bin(t, gatewayPkg), "--store", "memory"}} {
		dir := t.TempDir()
		junit, markdown := filepath.Join(dir, "cert.xml"), filepath.Join(dir, "cert.md")
		args := append([]string{"certify", "--profile", "watch", "--format", "json", "--junit", junit, "--markdown", markdown}, target...)
		out, errOut, code := runCLI(t, args...)
		if code != exitPass {
			t.Fatalf("%v: exit %d\n%s\n%s", target, code, out, errOut)
		}
		c := decodeCertificate(t, out)
		if c.Kit != buildinfo.Version() || c.Protocol != protocol.Version {
			t.Errorf("%v: kit %q, protocol %q", target, c.Kit, c.Protocol)
		}
		announced := c.TargetProtocol
		if announced == nil || announced.Version != protocol.Version || !slices.Contains(announced.Features, protocol.FeatureLeases) ||
			!slices.Contains(announced.Features, protocol.FeaturePrincipal) || !slices.Contains(announced.Features, protocol.FeatureWatchRunnable) ||
			!slices.Contains(announced.Features, protocol.FeatureWakeAt) {
			t.Fatalf("%v: target protocol %+v, want %s with the memory store's features (leases, principal, watch_runnable, wake_at)", target, announced, protocol.Version)
		}
		md, err := os.ReadFile(markdown)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"| target protocol | " + protocol.Version + " |", "| target features | " + strings.Join(announced.Features, ", ") + " |"} {
			if !strings.Contains(string(md), want) {
				t.Errorf("%v: markdown lacks %q:\n%s", target, want, md)
			}
		}
		xmlReport, err := os.ReadFile(junit)
		if err != nil {
			t.Fatal(err)
		}
		var suites junitSuites
		if err := xml.Unmarshal(xmlReport, &suites); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(suites.Properties, junitProperty{"target_protocol_version", protocol.Version}) ||
			!slices.Contains(suites.Properties, junitProperty{"target_features", strings.Join(announced.Features, ",")}) {
			t.Errorf("%v: junit properties %v", target, suites.Properties)
		}
	}
}

// olderServerHarness reaches its store through a server of protocol 1.6
// or older, which announced no version.
type olderServerHarness struct{ conformance.Harness }

func (olderServerHarness) Announced() protocol.StoreInfo {
	return protocol.StoreInfo{Features: []string{protocol.FeatureLeases, protocol.FeatureLeaseReader}}
}

// A target whose server predates protocol versions in Open is certified as
// of "1.5 or older".
func TestACertificateSaysATargetPredatesProtocolVersions(t *testing.T) {
	target := memoryWith(func(h conformance.Harness) conformance.Harness { return olderServerHarness{h} })
	announced, err := announcedProtocol(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	if announced == nil || announced.Version != "1.5 or older" || !slices.Equal(announced.Features, []string{protocol.FeatureLeases, protocol.FeatureLeaseReader}) {
		t.Fatalf("announced %+v, want 1.5 or older with leases and lease_reader", announced)
	}
	cert := certificate{Kit: "v1.2.0", Protocol: protocol.Version, Target: "old", TargetProtocol: announced}
	var md, text bytes.Buffer
	writeCertificateMarkdown(&md, cert)
	writeCertificateText(&text, cert)
	if !strings.Contains(md.String(), "| target protocol | 1.5 or older |\n| target features | leases, lease_reader |") {
		t.Errorf("markdown:\n%s", md.String())
	}
	if want := "versions: kit v1.2.0, protocol " + protocol.Version + "; the target announced protocol 1.5 or older with features: leases, lease_reader\n"; !strings.Contains(text.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, text.String())
	}
	// A store in this process announces nothing.
	if announced, err := announcedProtocol(context.Background(), memorytest.Target(true)); announced != nil || err != nil {
		t.Errorf("a store in this process: %+v, %v", announced, err)
	}
}
