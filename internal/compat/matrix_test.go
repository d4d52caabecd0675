package compat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway/gatewaytest"
	"github.com/runstate/runstate/internal/rulecov"
	"github.com/runstate/runstate/internal/testsupport/serverproc"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/protocol"
)

// How a host reaches the store it certifies.
type peerKind string

const (
	asPlugin  peerKind = "plugin"
	asGateway peerKind = "gateway"
)

// profiles are those every cell certifies: what every store promises,
// without the profiles that need a second process, faults or scale.
var profiles = []string{conformance.ProfileCore, conformance.ProfileLeases}

// A lack is what a host or a peer does not have, which some rules need:
// they skip, each skip's reason holding the phrase that names it.
type lack struct {
	name   string
	reason string
}

var (
	noBatches   = lack{"batches", "runstate.Batch"}
	noTestClock = lack{"test clock", "needs capability controlled_clock"}
)

var (
	batchRules = []string{"BATCH-001", "BATCH-002", "BATCH-003", "BATCH-004", "BATCH-005", "BATCH-006", "BATCH-007", "BATCH-008", "BATCH-009"}
	clockRules = []string{"LEASE-018", "CAP-003"}
	// auditActorRules compare the actor of audit events with the one the
	// target records, which through a gateway carries its token's name.
	auditActorRules = []string{"FSM-005", "AUD-001", "AUD-002", "AUD-008", "REC-001"}
)

// An expectation is a cell's outcome: every rule passes but those it
// names.
type expectation struct {
	// fellBack: by feature, rules that pass through the fallback the
	// client takes because its peer does not name the feature.
	fellBack map[string][]string
	// refused: by feature, rules that fail with UNSUPPORTED naming it,
	// for a peer that does not name it.
	refused map[string][]string
	// lacking: rules skipped for what the host or the peer lacks.
	lacking map[lack][]string
	// unrecorded: rules that fail because the peer's audit trail records
	// no principal at all; a peer of 1.5 or older names no features, so
	// nothing on the wire says so (docs/plugins.md, "Versions that meet").
	unrecorded []string
}

var certified = expectation{}

// cell is one meeting of a host and a peer.
type cell struct {
	host, peer release
	kind       peerKind
	want       expectation
}

// What today's client makes of a peer of 1.0, which has no batches (so no
// batch claim to start) and no test clock either.
var firstProtocol = expectation{
	fellBack: map[string][]string{protocol.FeatureUpdateReleaseLease: {"LEASE-022"}},
	refused:  map[string][]string{protocol.FeaturePrincipal: {"AUD-010"}},
	lacking:  map[lack][]string{noBatches: batchRules, noTestClock: clockRules},
}

// withoutPrincipalsInTrail is e for a gateway that records no principal.
func (e expectation) withoutPrincipalsInTrail() expectation {
	e.unrecorded = auditActorRules
	return e
}

var cells = []cell{
	// Today's host against every plugin and gateway.
	{today, today, asPlugin, certified},
	// A peer of 1.6 names no features, but is recognised by its SetClock
	// and sent every field it keeps.
	{today, release16, asPlugin, certified},
	{today, release10, asPlugin, firstProtocol},
	{today, today, asGateway, certified},
	{today, release16, asGateway, certified},
	{today, release10, asGateway, firstProtocol.withoutPrincipalsInTrail()},
	// Today's plugin and gateway under the earlier hosts, whose clients
	// send every field they know; the oldest has no test clock for a
	// process.
	{release16, today, asPlugin, certified},
	{release16, today, asGateway, certified},
	{release10, today, asPlugin, expectation{lacking: map[lack][]string{noTestClock: clockRules}}},
	{release10, today, asGateway, expectation{lacking: map[lack][]string{noTestClock: clockRules}}},
}

func (c cell) name() string { return fmt.Sprintf("host_%s/%s_%s", c.host.name, c.kind, c.peer.name) }

// TestVersionsMeet certifies each cell's peer with its host and checks
// the outcome the cell expects; the matrix that comes out is the one
// docs/plugins.md shows.
func TestVersionsMeet(t *testing.T) {
	b := newBuilds(t)
	var mu sync.Mutex
	outcomes := map[string]string{}
	t.Run("cells", func(t *testing.T) {
		for _, c := range cells {
			t.Run(c.name(), func(t *testing.T) {
				t.Parallel()
				host, peer := b.binaries(t, c.host), b.binaries(t, c.peer)
				got, mode := certifyCell(t, host, peer, c.kind)
				var info *protocol.StoreInfo
				if c.host == today {
					i := announced(t, peer, c.kind)
					info = &i
				}
				for _, p := range c.want.judge(got, info) {
					t.Error(p)
				}
				text := fmt.Sprintf("%s; %s", c.want, countVerdicts(got))
				if mode != "certify" {
					text += " (" + mode + ")"
				}
				t.Logf("%s: %s", c.name(), text)
				mu.Lock()
				outcomes[c.name()] = text
				mu.Unlock()
			})
		}
	})
	table := matrixTable(outcomes)
	t.Logf("the matrix (rules passed/failed/skipped):\n%s", table)
	if t.Failed() || len(outcomes) < len(cells) {
		return // a partial matrix is not the one documented
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "plugins.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), table) {
		t.Errorf("docs/plugins.md (\"Versions that meet\") does not show the matrix as it came out; the table to put there:\n%s", table)
	}
}

// certifyCell runs the host's conformance-runner on the peer's memory
// plugin, or its gateway in front of a memory store, and returns each
// rule's verdict and how the runner ran: certify, or, in a runner
// without it, a plain run of the profiles' rules it knows.
func certifyCell(t *testing.T, host, peer binaries, kind peerKind) (map[string]verdict, string) {
	runner := host[runnerCmd]
	target := []string{"--plugin", peer[memoryPluginCmd]}
	if kind == asGateway {
		target = []string{"--gateway", peer[gatewayCmd], "--config", "store=memory"}
	}
	mode, args := "certify", append([]string{"certify", "--profile", strings.Join(profiles, ",")}, target...)
	if !hasCertify(t, runner) {
		mode, args = "plain run", append([]string{"--run", strings.Join(knownProfileRules(t, runner), ",")}, target...)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(runner, append(args, "--format", "json")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	// 1: a rule failed; 4: certify's "not certified", a rule passed in no mode.
	if err != nil && !(errors.As(err, &exit) && (exit.ExitCode() == 1 || exit.ExitCode() == 4)) {
		t.Fatalf("%s %s: %v\n%s", runner, strings.Join(args, " "), err, serverproc.Tail(stderr.Bytes()))
	}
	got, err := verdicts(stdout.Bytes())
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", runner, strings.Join(args, " "), err, serverproc.Tail(stderr.Bytes()))
	}
	rulecov.LogRunner(t, rulecov.PathMatrix, t.Name(), stdout.Bytes())
	return got, mode
}

// hasCertify reports whether runner's help lists the certify command.
func hasCertify(t *testing.T, runner string) bool {
	out, err := exec.Command(runner, "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", runner, err)
	}
	return slices.ContainsFunc(strings.Split(string(out), "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) > 0 && f[0] == "certify"
	})
}

// knownProfileRules are the rules of the profiles that runner knows
// (--list-rules), for a runner that cannot select profiles.
func knownProfileRules(t *testing.T, runner string) []string {
	out, err := exec.Command(runner, "--list-rules").Output()
	if err != nil {
		t.Fatalf("%s --list-rules: %v", runner, err)
	}
	var known []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			known = append(known, f[0])
		}
	}
	var ids []string
	for _, p := range profiles {
		for _, r := range conformance.ProfileRules(p) {
			if slices.Contains(known, r.ID) {
				ids = append(ids, r.ID)
			}
		}
	}
	return ids
}

// announced is what the peer says of itself at Open to today's client:
// its protocol version and the features it names.
func announced(t *testing.T, peer binaries, kind peerKind) protocol.StoreInfo {
	ctx := context.Background()
	if kind == asGateway {
		setup, err := gatewaytest.Plaintext(peer[gatewayCmd], t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		info, err := gatewaytest.Describe(ctx, setup, "memory")
		if err != nil {
			t.Fatalf("opening the gateway: %v", err)
		}
		return info
	}
	c, err := plugin.Open(ctx, peer[memoryPluginCmd], plugin.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("opening the plugin: %v", err)
	}
	defer c.Close()
	return c.Info()
}

// keptFields are the fields with meaning a peer of protocol 1.7 names.
var keptFields = []string{protocol.FeatureUpdateReleaseLease, protocol.FeaturePrincipal, protocol.FeatureBatchClaimStart}

// judge returns how got differs from e. info, when given, is what the
// peer announced to today's client: a fallback or a refusal is only for
// a feature it does not name, and a peer expected to certify names them
// all.
func (e expectation) judge(got map[string]verdict, info *protocol.StoreInfo) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if info != nil && e.isCertified() {
		for _, f := range keptFields {
			if !info.Has(f) {
				report("the peer (protocol %q) does not name %s, which a certified peer keeps", info.ProtocolVersion, f)
			}
		}
	}
	named := map[string]bool{}
	for f, rules := range e.fellBack {
		for _, id := range rules {
			named[id] = true
			if info != nil && info.Has(f) {
				report("%s: the peer names %s, so nothing falls back", id, f)
			}
			if v := got[id]; v.outcome != passed {
				report("%s: %s, want a pass through the fallback for %s\n%s", id, v.outcome, f, strings.Join(v.why, "\n"))
			}
		}
	}
	for f, rules := range e.refused {
		for _, id := range rules {
			named[id] = true
			if info != nil && info.Has(f) {
				report("%s: the peer names %s, so nothing is refused", id, f)
			}
			v := got[id]
			if v.outcome != failed {
				report("%s: %s, want a refusal (UNSUPPORTED %s)", id, v.outcome, f)
			}
			for _, why := range v.why {
				if !strings.Contains(why, `"UNSUPPORTED"`) || !strings.Contains(why, "does not announce "+f) {
					report("%s failed without the refusal UNSUPPORTED naming %s:\n%s", id, f, why)
				}
			}
		}
	}
	for l, rules := range e.lacking {
		for _, id := range rules {
			named[id] = true
			v := got[id]
			if v.outcome != skipped {
				report("%s: %s, want a skip for the lack of %s\n%s", id, v.outcome, l.name, strings.Join(v.why, "\n"))
			}
			for _, why := range v.why {
				if !strings.Contains(why, l.reason) {
					report("%s skipped for a reason that does not name the lack of %s (%q): %s", id, l.name, l.reason, why)
				}
			}
		}
	}
	for _, id := range e.unrecorded {
		named[id] = true
		v := got[id]
		if v.outcome != failed {
			report("%s: %s, want a failure for audit events without principals", id, v.outcome)
		}
		for _, why := range v.why {
			if !strings.Contains(why, `"actor":{`) || strings.Contains(why, `"principal"`) {
				report("%s failed otherwise than for audit events without principals:\n%s", id, why)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(named)) {
		if _, ok := got[id]; !ok {
			report("%s: the runner did not run it", id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		if v := got[id]; !named[id] && v.outcome != passed {
			what := "failed without a named refusal (a silent loss)"
			if v.outcome == skipped {
				what = "skipped for no lack the cell expects"
			}
			report("%s %s:\n%s", id, what, strings.Join(v.why, "\n"))
		}
	}
	return problems
}

func (e expectation) isCertified() bool {
	return len(e.fellBack) == 0 && len(e.refused) == 0 && len(e.lacking) == 0 && len(e.unrecorded) == 0
}

// String names the outcome as the matrix does.
func (e expectation) String() string {
	if e.isCertified() {
		return "certified"
	}
	var parts []string
	if len(e.refused) > 0 {
		parts = append(parts, "refused ("+strings.Join(slices.Sorted(maps.Keys(e.refused)), ", ")+")")
	}
	if len(e.unrecorded) > 0 {
		parts = append(parts, fmt.Sprintf("trail without principals (%d rules)", len(e.unrecorded)))
	}
	if len(e.fellBack) > 0 {
		parts = append(parts, "fell back ("+strings.Join(slices.Sorted(maps.Keys(e.fellBack)), ", ")+")")
	}
	if len(e.lacking) > 0 {
		var names []string
		for l := range e.lacking {
			names = append(names, l.name)
		}
		slices.Sort(names)
		parts = append(parts, "lacks ("+strings.Join(names, ", ")+")")
	}
	return strings.Join(parts, ", ")
}

// matrixTable is the matrix in Markdown: a row per host, a column per
// plugin and gateway.
func matrixTable(outcomes map[string]string) string {
	var b strings.Builder
	b.WriteString("| host \\ peer |")
	for _, kind := range []peerKind{asPlugin, asGateway} {
		for _, r := range releases {
			fmt.Fprintf(&b, " %s %s (%s) |", kind, r.name, r.protocol)
		}
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", 2*len(releases)) + "\n")
	for _, host := range releases {
		fmt.Fprintf(&b, "| %s (%s) |", host.name, host.protocol)
		for _, kind := range []peerKind{asPlugin, asGateway} {
			for _, peer := range releases {
				text, ok := outcomes[cell{host: host, peer: peer, kind: kind}.name()]
				if !ok {
					text = "—"
				}
				fmt.Fprintf(&b, " %s |", text)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
