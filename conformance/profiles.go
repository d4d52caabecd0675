package conformance

import (
	"fmt"
	"slices"
	"strings"
)

// A Profile is a part of the contract certified as a whole, in the manner
// of Kubernetes conformance profiles: an integrator learns which parts a
// store proved, not only how many rules passed. Every rule belongs to
// exactly one profile (ProfileOf); the scale profile holds no rule but
// the measurements of MeasureScale.
type Profile struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// Profile IDs.
const (
	ProfileCore   = "core"
	ProfileLeases = "leases"
	ProfileShared = "shared"
	ProfileWatch  = "watch"
	ProfileWake   = "parking"
	ProfileFaults = "faults"
	ProfileScale  = "scale"
)

var profiles = []Profile{
	{ProfileCore, "Runs, status machine, versions, audit, listings, recovery, batches, bad input and context"},
	{ProfileLeases, "Leases, fencing, claims and the runnable listing, and the clock they are judged by"},
	{ProfileShared, "Many handles at once: linearizable histories and a second handle on the same data"},
	{ProfileWatch, "Watching a run: a wake-up at each write (an optional interface; a store without it is polled)"},
	{ProfileWake, "Parked runs: wake times that claims and the runnable listing respect (a plugin or gateway of protocol 1.7 or older cannot park)"},
	{ProfileFaults, "Faults at the backend: partitions, resets, delays and restarts"},
	{ProfileScale, "Cost of claim-next, the runnable listing and a deep ListRuns page as the store grows"},
}

// Profiles returns every profile in the order reports list them.
func Profiles() []Profile { return slices.Clone(profiles) }

// ProfileOf returns the profile a rule belongs to. A rule goes where the
// capability it needs goes, so that a store lacking one capability misses
// one profile, not several: a rule needing a fault is in faults whatever
// its area; LIN and a second handle are in shared; a rule needing leases
// or the controlled clock is in leases (recovery under a live lease, lease
// tokens in audit events, batch claims); watching, an optional interface
// a store may go without, is a profile of its own, and so is parking,
// which a store reached through an older plugin or gateway lacks;
// everything else is core.
func ProfileOf(r Rule) string {
	switch {
	case r.Area == "WATCH":
		return ProfileWatch
	case r.Area == "WAKE":
		return ProfileWake
	case r.Area == "FAULT" || len(r.Requires.Faults) > 0:
		return ProfileFaults
	case r.Area == "LIN" || r.Requires.SecondHandle:
		return ProfileShared
	case r.Area == "LEASE" || r.Requires.Leases || r.Requires.ControlledClock:
		return ProfileLeases
	}
	return ProfileCore
}

// ProfileRules returns the rules of profile, ordered as Rules orders them;
// none for scale, or for an unknown profile.
func ProfileRules(profile string) []Rule {
	var out []Rule
	for _, r := range Rules() {
		if ProfileOf(r) == profile {
			out = append(out, r)
		}
	}
	return out
}

// SelectProfiles returns the profiles named (all when names is empty);
// an unknown name is an error.
func SelectProfiles(names []string) ([]Profile, error) {
	if len(names) == 0 {
		return Profiles(), nil
	}
	var out []Profile
	for _, p := range profiles {
		if slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, p.ID) }) {
			out = append(out, p)
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(profiles, func(p Profile) bool { return strings.EqualFold(n, p.ID) }) {
			ids := make([]string, len(profiles))
			for i, p := range profiles {
				ids[i] = p.ID
			}
			return nil, fmt.Errorf("no profile %q: want %s", n, strings.Join(ids, ", "))
		}
	}
	return out, nil
}

// ModeResults are the results of the rules run in one mode of a
// certification: the same store in one configuration, such as with a
// controlled clock, with the real clock, or under faults.
type ModeResults struct {
	// Mode names the configuration: controlled-clock, real-clock, faults, restarts.
	Mode string `json:"mode"`
	// Capabilities are those the target declared in this mode.
	Capabilities Capabilities `json:"capabilities"`
	Results      []Result     `json:"-"`
}

// Verdict statuses.
const (
	// Certified: every rule of the profile passed in at least one mode and
	// none failed in any (for scale: no operation grew beyond its bound).
	Certified = "certified"
	// Failed: a rule failed, or the harness broke, in some mode; or scale
	// flagged an operation, or the store failed while measured.
	Failed = "failed"
	// NotCertified: nothing failed, but a rule passed in no mode, because
	// the target lacks what it needs (Lacks) or it was not run.
	NotCertified = "not certified"
)

// ProfileVerdict is the certificate of one profile.
type ProfileVerdict struct {
	Profile string `json:"profile"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	// Verdict is Status with its reason, as reports print it:
	// "not certified (lacks leases)".
	Verdict string `json:"verdict"`
	// Lacks names what the target lacks for the rules that passed in no
	// mode: a capability ("leases"), a fault ("fault restart"), or an
	// optional interface ("runstate.BatchCreator").
	Lacks []string `json:"lacks,omitempty"`
	// Proven are the rules that passed in at least one mode and failed in none.
	Proven []string `json:"proven"`
	// Failed are the rules that failed or broke, with the mode they did in.
	Failed []ModeOutcome `json:"failed,omitempty"`
	// Unproven are the rules that passed in no mode, and why per mode.
	Unproven []ModeOutcome `json:"unproven,omitempty"`
	// Skipped lists, per mode, every rule of the profile that skipped
	// there and why (a rule proven in another mode included).
	Skipped map[string][]ModeOutcome `json:"skipped,omitempty"`
	// Scale holds the measurements of the scale profile.
	Scale []ScaleMeasurement `json:"scale,omitempty"`
}

// ModeOutcome is what one rule did in one mode.
type ModeOutcome struct {
	Rule    string  `json:"rule"`
	Mode    string  `json:"mode"`
	Outcome Outcome `json:"outcome"`
	Detail  string  `json:"detail,omitempty"`
	lacks   string  // Result.Lacks
}

// Verdicts judges each profile from the results of every mode: a rule is
// proven when it passed in some mode and neither failed nor broke in any.
// scale is the MeasureScale of the scale profile (nil: not measured), the
// measurement of the operation that failed included when it returned a
// *ScaleFailure.
func Verdicts(selected []Profile, modes []ModeResults, scale []ScaleMeasurement) []ProfileVerdict {
	var out []ProfileVerdict
	for _, p := range selected {
		v := ProfileVerdict{Profile: p.ID, Title: p.Title, Proven: []string{}}
		if p.ID == ProfileScale {
			v.judgeScale(scale)
		} else {
			v.judgeRules(ProfileRules(p.ID), modes)
		}
		out = append(out, v)
	}
	return out
}

func (v *ProfileVerdict) judgeRules(rules []Rule, modes []ModeResults) {
	for _, r := range rules {
		var passed, failed bool
		var skips []ModeOutcome
		for _, m := range modes {
			i := slices.IndexFunc(m.Results, func(res Result) bool { return res.Rule.ID == r.ID })
			if i < 0 {
				continue
			}
			res := m.Results[i]
			o := ModeOutcome{Rule: r.ID, Mode: m.Mode, Outcome: res.Outcome, Detail: res.Detail, lacks: res.Lacks}
			switch res.Outcome {
			case Pass:
				passed = true
			case Fail, Error:
				failed = true
				if len(res.Failures) > 0 {
					o.Detail = res.Failures[0].String()
				}
				v.Failed = append(v.Failed, o)
			case Skip:
				skips = append(skips, o)
				if v.Skipped == nil {
					v.Skipped = map[string][]ModeOutcome{}
				}
				v.Skipped[m.Mode] = append(v.Skipped[m.Mode], o)
			}
		}
		switch {
		case failed:
		case passed:
			v.Proven = append(v.Proven, r.ID)
		default:
			if len(skips) == 0 {
				skips = []ModeOutcome{{Rule: r.ID, Outcome: Skip, Detail: "not run in any mode"}}
			}
			v.Unproven = append(v.Unproven, skips...)
			for _, s := range skips {
				for _, lack := range lackOf(modes, r, s) {
					if !slices.Contains(v.Lacks, lack) {
						v.Lacks = append(v.Lacks, lack)
					}
				}
			}
		}
	}
	switch {
	case len(v.Failed) > 0:
		ids := []string{}
		for _, f := range v.Failed[:min(len(v.Failed), 5)] {
			ids = append(ids, f.Rule+" in "+f.Mode)
		}
		if more := len(v.Failed) - len(ids); more > 0 {
			ids = append(ids, fmt.Sprintf("and %d more", more))
		}
		v.Status, v.Verdict = Failed, fmt.Sprintf("%s (%s)", Failed, strings.Join(ids, ", "))
	case len(v.Unproven) > 0:
		v.Status = NotCertified
		why := fmt.Sprintf("%d of %d rules proven in no mode", len(rules)-len(v.Proven), len(rules))
		if len(v.Lacks) > 0 {
			why = "lacks " + lacksText(v.Lacks) + "; " + why
		}
		v.Verdict = fmt.Sprintf("%s (%s)", NotCertified, why)
	default:
		v.Status, v.Verdict = Certified, fmt.Sprintf("%s (%d rules)", Certified, len(rules))
	}
}

// lackOf names what the target lacked for rule r to skip as s: the
// capabilities the mode did not declare, each fault by itself ("fault
// restart"), or the optional interface the check asked of the store
// (Result.Lacks: "runstate.LeaseReader"); none when the skip says neither.
func lackOf(modes []ModeResults, r Rule, s ModeOutcome) []string {
	i := slices.IndexFunc(modes, func(m ModeResults) bool { return m.Mode == s.Mode })
	if i >= 0 {
		if miss := modes[i].Capabilities.missing(r.Requires); len(miss) > 0 {
			var out []string
			for _, m := range miss {
				if strings.HasPrefix(m, "faults (") {
					for _, f := range r.Requires.Faults {
						out = append(out, "fault "+string(f))
					}
					continue
				}
				out = append(out, m)
			}
			return out
		}
	}
	if s.lacks != "" {
		return []string{s.lacks}
	}
	return nil
}

// lacksText joins lacks as verdicts print them, the faults in one:
// "second_handle, faults (partition, restart)".
func lacksText(lacks []string) string {
	var out, faults []string
	for _, l := range lacks {
		if f, ok := strings.CutPrefix(l, "fault "); ok {
			faults = append(faults, f)
		} else {
			out = append(out, l)
		}
	}
	if len(faults) > 0 {
		out = append(out, "faults ("+strings.Join(faults, ", ")+")")
	}
	return strings.Join(out, ", ")
}

func (v *ProfileVerdict) judgeScale(scale []ScaleMeasurement) {
	v.Scale = scale
	var broken, flagged, skipped []string
	for _, m := range scale {
		switch {
		case m.Failed != "":
			broken = append(broken, m.Operation+": "+m.Failed)
		case m.Skipped != "":
			skipped = append(skipped, m.Operation+": "+m.Skipped)
		case m.Flagged:
			flagged = append(flagged, fmt.Sprintf("%s ×%.1f from %d to %d runs, bound ×%.1f", m.Operation, max(m.Ratio, m.ReadsRatio), m.SmallRuns, m.LargeRuns, m.Bound))
		default:
			v.Proven = append(v.Proven, m.Operation)
		}
	}
	if len(skipped) > 0 {
		v.Lacks = []string{"leases"}
	}
	switch {
	case len(broken) > 0:
		v.Status, v.Verdict = Failed, fmt.Sprintf("%s (the store failed while measured: %s)", Failed, strings.Join(broken, "; "))
	case len(flagged) > 0:
		v.Status, v.Verdict = Failed, fmt.Sprintf("%s (grows linearly or worse: %s)", Failed, strings.Join(flagged, "; "))
	case len(scale) == 0:
		v.Status, v.Verdict = NotCertified, NotCertified+" (not measured)"
	case len(skipped) > 0:
		v.Status, v.Verdict = NotCertified, fmt.Sprintf("%s (lacks leases; %s)", NotCertified, strings.Join(skipped, "; "))
	default:
		v.Status, v.Verdict = Certified, fmt.Sprintf("%s (%d operations)", Certified, len(scale))
	}
}
