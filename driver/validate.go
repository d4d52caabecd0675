package driver

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runstate/runstate"
)

// prepareCreate validates p and normalises it in place: Status becomes
// queued, an empty RunID becomes a new ULID, an empty actor kind operator.
// The kit calls it before a store reads or writes anything.
func prepareCreate(p *runstate.CreateRunParams) error {
	// A generated ULID, or a valid caller-supplied id (RUN-001, RUN-002, BAD-001).
	if p.RunID == "" {
		p.RunID = newRunID()
	} else if err := validateRunID(p.RunID); err != nil {
		return err
	}
	if err := validateText("workflow_name", p.WorkflowName, runstate.MaxWorkflowNameLen, true); err != nil { // BAD-003
		return err
	}
	// Created only as queued, or an alias of it (RUN-007, FSM-006).
	if p.Status != "" {
		st, err := runstate.ParseRunStatus(p.Status)
		if err != nil {
			return err
		}
		if st != runstate.StatusQueued {
			return runstate.InvalidArgument("status", "a run is created as queued, not %s; create it, then update it", st)
		}
	}
	p.Status = string(runstate.StatusQueued)
	if err := validateText("message", p.Message, runstate.MaxMessageLen, false); err != nil {
		return err
	}
	if err := validatePriority(p.Priority); err != nil {
		return err
	}
	if err := validateLabels("labels", p.Labels); err != nil {
		return err
	}
	if len(p.Steps) > runstate.MaxSteps {
		return runstate.InvalidArgument("steps", "%d steps, the limit is %d", len(p.Steps), runstate.MaxSteps)
	}
	seen := make(map[string]bool, len(p.Steps))
	hosts := 0
	for _, st := range p.Steps {
		if err := validateStepName(st.Name, seen); err != nil {
			return err
		}
		if err := validateHostNames(st.Name, st.Hosts); err != nil {
			return err
		}
		hosts += len(st.Hosts)
	}
	if hosts > runstate.MaxHostStates {
		return runstate.InvalidArgument("hosts", "%d host states in all steps, the limit is %d", hosts, runstate.MaxHostStates)
	}
	if p.RetryOf != "" { // BAD-001, RUN-006
		if err := validateToken("retry_of", p.RetryOf, runstate.MaxRunIDLen, ""); err != nil {
			return err
		}
		if p.RetryOf == p.RunID {
			return runstate.InvalidArgument("retry_of", "a run cannot retry itself")
		}
	}
	if err := prepareActor(&p.Actor); err != nil {
		return err
	}
	return validateText("reason", p.Reason, runstate.MaxReasonLen, false)
}

// prepareUpdate validates p and normalises it in place (status aliases,
// actor kind). It checks the input alone; applyUpdate checks it against the run.
// A meaningless update is an ErrInvalidArgument (BAD-007).
// prepareWakeAt normalises a wake time (Timestamp) and bounds it to the
// years a store's columns and keys hold: a time outside them is a
// mistake (an unset variable, a unit error), never a plan.
func prepareWakeAt(t time.Time) (time.Time, error) {
	if t.IsZero() {
		return time.Time{}, nil // wakes the run
	}
	if t.Year() < 1970 || t.Year() > 9999 {
		return t, runstate.InvalidArgument("wake_at", "is %s; a wake time lies between the years 1970 and 9999 (zero wakes the run now)",
			t.UTC().Format(time.RFC3339Nano))
	}
	return Timestamp(t), nil
}

func prepareUpdate(p *runstate.UpdateRunParams) error {
	if err := validateRunID(p.RunID); err != nil {
		return err
	}
	if p.ExpectedVersion < 1 {
		return runstate.InvalidArgument("expected_version", "is %d; every update names the version it was based on (>= 1)", p.ExpectedVersion)
	}
	if p.LeaseToken < 0 {
		return runstate.InvalidArgument("lease_token", "is %d; tokens are positive, or 0 for an unfenced write", p.LeaseToken)
	}
	if p.ReleaseLease && p.LeaseToken == 0 {
		return runstate.InvalidArgument("release_lease", "is set on an unfenced write; name the lease to release with lease_token")
	}
	if p.Status != "" {
		st, err := runstate.ParseRunStatus(p.Status)
		if err != nil {
			return err
		}
		p.Status = string(st)
	}
	if p.Message != nil {
		if err := validateText("message", *p.Message, runstate.MaxMessageLen, false); err != nil {
			return err
		}
	}
	if p.Priority != nil {
		if err := validatePriority(*p.Priority); err != nil {
			return err
		}
	}
	if p.Diagnostic != nil {
		if err := validateDiagnostic(p.Diagnostic); err != nil {
			return err
		}
	}
	if err := validateText("interrupted_reason", p.InterruptedReason, runstate.MaxReasonLen, false); err != nil {
		return err
	}
	if p.InterruptedReason != "" && runstate.RunStatus(p.Status) != runstate.StatusInterrupted { // BAD-007
		return runstate.InvalidArgument("interrupted_reason", "is only set together with status interrupted")
	}
	if p.Labels != nil {
		if err := validateLabels("labels", p.Labels); err != nil {
			return err
		}
	}
	if p.WakeAt != nil {
		wake, err := prepareWakeAt(*p.WakeAt)
		if err != nil {
			return err
		}
		p.WakeAt = &wake // the caller's value is read, never written
	}
	if len(p.Steps) > runstate.MaxSteps {
		return runstate.InvalidArgument("steps", "%d step patches, the limit is %d", len(p.Steps), runstate.MaxSteps)
	}
	seen := make(map[string]bool, len(p.Steps))
	for i := range p.Steps {
		if err := prepareStepPatch(&p.Steps[i], seen); err != nil {
			return err
		}
	}
	if err := prepareActor(&p.Actor); err != nil {
		return err
	}
	if err := validateText("reason", p.Reason, runstate.MaxReasonLen, false); err != nil {
		return err
	}
	// An update with nothing to change is refused, so it writes nothing,
	// updated_at included (BAD-007, CAS-005).
	if p.Status == "" && p.Message == nil && p.Priority == nil && p.Diagnostic == nil &&
		p.Labels == nil && len(p.Steps) == 0 && p.WakeAt == nil {
		return runstate.InvalidArgument("update", "changes nothing; set a status, message, priority, labels, diagnostic, steps or wake_at")
	}
	return nil
}

func prepareStepPatch(sp *runstate.StepPatch, seen map[string]bool) error {
	if err := validateStepName(sp.Name, seen); err != nil {
		return err
	}
	if sp.Status != "" {
		st, err := runstate.ParseStepStatus(sp.Status)
		if err != nil {
			return err
		}
		sp.Status = string(st)
	}
	if len(sp.Hosts) > runstate.MaxHostsPerStep {
		return runstate.InvalidArgument("hosts", "step %q: %d host patches, the limit is %d", sp.Name, len(sp.Hosts), runstate.MaxHostsPerStep)
	}
	hosts := make(map[string]bool, len(sp.Hosts))
	for i := range sp.Hosts {
		hp := &sp.Hosts[i]
		if err := validateHostName(sp.Name, hp.Host, hosts); err != nil {
			return err
		}
		if hp.Status != "" {
			st, err := runstate.ParseStepStatus(hp.Status)
			if err != nil {
				return err
			}
			hp.Status = string(st)
		}
		if hp.OutputSummary != nil {
			if err := validateText("output_summary", *hp.OutputSummary, runstate.MaxHostOutputBytes, false); err != nil {
				return err
			}
		}
		if hp.Error != nil {
			if err := validateText("host error", *hp.Error, runstate.MaxHostErrorLen, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepareGet validates a run_id given to GetRun (BAD-001).
func prepareGet(runID string) error { return validateRunID(runID) }

// validateOwner checks a lease owner: a non-blank worker (BAD-004).
func validateOwner(o runstate.Owner) error {
	if err := validateText("owner.worker", o.Worker, runstate.MaxOwnerLen, true); err != nil {
		return err
	}
	return validateText("owner.incarnation", o.Incarnation, runstate.MaxOwnerLen, false)
}

// validateLeaseToken checks a lease token given to renew or release: positive (BAD-004).
func validateLeaseToken(token int64) error {
	if token <= 0 {
		return runstate.InvalidArgument("token", "is %d; lease tokens are positive", token)
	}
	return nil
}

// prepareAuditQuery validates p and returns the effective page size; a
// negative after_seq or a limit out of range is ErrInvalidArgument (LIST-007).
func prepareAuditQuery(p runstate.ListAuditParams) (limit int, err error) {
	if err := validateRunID(p.RunID); err != nil {
		return 0, err
	}
	if p.AfterSeq < 0 {
		return 0, runstate.InvalidArgument("after_seq", "is %d; it must be >= 0", p.AfterSeq)
	}
	return pageLimit(p.Limit)
}

// pageLimit resolves a page size: 0 for the default, else 1 to runstate.MaxPageLimit (LIST-007).
func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return runstate.DefaultPageLimit, nil
	case n < 0 || n > runstate.MaxPageLimit:
		return 0, runstate.InvalidArgument("limit", "is %d; use 1 to %d, or 0 for %d", n, runstate.MaxPageLimit, runstate.DefaultPageLimit)
	}
	return n, nil
}

// parseStatuses parses a status filter: aliases resolve (FSM-006), unknown
// names are refused (BAD-002), and so are terminal ones where only
// non-terminal runs qualify (LEASE-010).
func parseStatuses(field string, in []string, def []runstate.RunStatus, nonTerminalOnly bool) ([]runstate.RunStatus, error) {
	if len(in) == 0 {
		return def, nil
	}
	out := make([]runstate.RunStatus, 0, len(in))
	for _, s := range in {
		st, err := runstate.ParseRunStatus(s)
		if err != nil {
			return nil, runstate.InvalidArgument(field, "unknown run status %q (want one of %s, or the aliases created, pending)", s, joinStatuses(runstate.RunStatuses()))
		}
		if nonTerminalOnly && st.Terminal() {
			return nil, runstate.InvalidArgument(field, "%s is terminal; only queued, running and waiting runs can be claimed", st)
		}
		if !slices.Contains(out, st) { // an alias and its status name one status
			out = append(out, st)
		}
	}
	return out, nil
}

func validatePriority(p int) error {
	if p < runstate.MinPriority || p > runstate.MaxPriority {
		return runstate.InvalidArgument("priority", "is %d; use %d to %d", p, runstate.MinPriority, runstate.MaxPriority)
	}
	return nil
}

func validateDiagnostic(d *runstate.Diagnostic) error {
	if err := validateText("diagnostic.error_code", d.ErrorCode, runstate.MaxErrorCodeLen, false); err != nil {
		return err
	}
	if err := validateText("diagnostic.message", d.Message, runstate.MaxMessageLen, false); err != nil {
		return err
	}
	if err := validateText("diagnostic.source_step", d.SourceStep, runstate.MaxStepNameLen, false); err != nil {
		return err
	}
	if err := validateText("diagnostic.source_host", d.SourceHost, runstate.MaxHostNameLen, false); err != nil {
		return err
	}
	if len(d.Details) > runstate.MaxDiagnosticDetails {
		return runstate.InvalidArgument("diagnostic.details", "%d entries, the limit is %d", len(d.Details), runstate.MaxDiagnosticDetails)
	}
	for k, v := range d.Details {
		if err := validateText("diagnostic.details key", k, runstate.MaxLabelKeyLen, true); err != nil {
			return err
		}
		if err := validateText("diagnostic.details["+k+"]", v, runstate.MaxDetailValueLen, false); err != nil {
			return err
		}
	}
	return nil
}

// diagnosticMissing reports what a runstate.Diagnostic lacks to be usable by an
// orchestrator (docs/requirements.md#001-7: error_code, message, retryable); "" when complete.
// A blank error_code or message is missing (DIAG-002).
func diagnosticMissing(d *runstate.Diagnostic) string {
	switch {
	case d == nil:
		return "a diagnostic (error_code, message, retryable)"
	case strings.TrimSpace(d.ErrorCode) == "":
		return "diagnostic.error_code"
	case strings.TrimSpace(d.Message) == "":
		return "diagnostic.message"
	}
	return ""
}

func validateLabels(field string, labels map[string]string) error {
	if len(labels) > runstate.MaxLabels {
		return runstate.InvalidArgument(field, "%d labels, the limit is %d", len(labels), runstate.MaxLabels)
	}
	for k, v := range labels {
		if err := validateToken(field+" key", k, runstate.MaxLabelKeyLen, "/"); err != nil {
			return err
		}
		if err := validateText(field+"["+k+"]", v, runstate.MaxLabelValueLen, false); err != nil {
			return err
		}
	}
	return nil
}

func validateStepName(name string, seen map[string]bool) error {
	if err := validateText("step name", name, runstate.MaxStepNameLen, true); err != nil {
		return err
	}
	if seen[name] { // BAD-007
		return runstate.InvalidArgument("steps", "step %q appears twice", name)
	}
	seen[name] = true
	return nil
}

func validateHostNames(step string, hosts []string) error {
	if len(hosts) > runstate.MaxHostsPerStep {
		return runstate.InvalidArgument("hosts", "step %q has %d hosts, the limit is %d", step, len(hosts), runstate.MaxHostsPerStep)
	}
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if err := validateHostName(step, h, seen); err != nil {
			return err
		}
	}
	return nil
}

func validateHostName(step, host string, seen map[string]bool) error {
	if err := validateText("host name", host, runstate.MaxHostNameLen, true); err != nil {
		return err
	}
	if seen[host] {
		return runstate.InvalidArgument("hosts", "host %q appears twice in step %q", host, step)
	}
	seen[host] = true
	return nil
}

// prepareActor records an actor without a kind as operator (AUD-008) and
// refuses an unknown kind (BAD-007).
func prepareActor(a *runstate.Actor) error {
	switch a.Kind {
	case "":
		a.Kind = runstate.ActorOperator
	case runstate.ActorWorker, runstate.ActorRecovery, runstate.ActorOperator:
	default:
		return runstate.InvalidArgument("actor.kind", "unknown actor kind %q (want worker, recovery or operator)", a.Kind)
	}
	if err := validateText("actor.id", a.ID, runstate.MaxActorIDLen, false); err != nil {
		return err
	}
	return validateText("actor.principal", a.Principal, runstate.MaxActorIDLen, false)
}

// validateText checks free text: valid UTF-8 without NUL bytes (BAD-006), at
// most max bytes, and non-blank when required (BAD-005), naming the field.
func validateText(field, s string, max int, required bool) error {
	if required && strings.TrimSpace(s) == "" {
		return runstate.InvalidArgument(field, "must not be empty")
	}
	if len(s) > max {
		return runstate.InvalidArgument(field, "is %d bytes long, the limit is %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return runstate.InvalidArgument(field, "is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return runstate.InvalidArgument(field, "contains a NUL byte")
	}
	return nil
}

// prepareClaimRun validates p (BAD-001, BAD-002, BAD-004); statuses default
// to queued and waiting (LEASE-011).
func prepareClaimRun(p runstate.ClaimRunParams) (claimRequest, error) {
	if err := validateRunID(p.RunID); err != nil {
		return claimRequest{}, err
	}
	if err := validateOwner(p.Owner); err != nil {
		return claimRequest{}, err
	}
	if err := runstate.ValidateTTL(p.TTL); err != nil {
		return claimRequest{}, err
	}
	st, err := parseStatuses("statuses", p.Statuses, defaultRunnableStatuses(), true)
	if err != nil {
		return claimRequest{}, err
	}
	return claimRequest{Owner: p.Owner, TTL: p.TTL, Statuses: st}, nil
}

// prepareClaimNext validates p (BAD-002, BAD-004) into the query of one
// candidate and the claim to make of it; the caller names the claimant.
func prepareClaimNext(p runstate.ClaimNextParams) (RunnableQuery, claimRequest, error) {
	if err := validateOwner(p.Owner); err != nil {
		return RunnableQuery{}, claimRequest{}, err
	}
	if err := runstate.ValidateTTL(p.TTL); err != nil {
		return RunnableQuery{}, claimRequest{}, err
	}
	q, err := prepareRunnable(p.Filter, 1, "")
	if err != nil {
		return RunnableQuery{}, claimRequest{}, err
	}
	return q, claimRequest{Owner: p.Owner, TTL: p.TTL, Statuses: q.Statuses}, nil
}

// prepareRenew validates p (BAD-001, BAD-004).
func prepareRenew(p runstate.RenewLeaseParams) error {
	if err := validateRunID(p.RunID); err != nil {
		return err
	}
	if err := validateLeaseToken(p.Token); err != nil {
		return err
	}
	return runstate.ValidateTTL(p.TTL)
}

// prepareRelease validates p (BAD-001, BAD-004).
func prepareRelease(p runstate.ReleaseLeaseParams) error {
	if err := validateRunID(p.RunID); err != nil {
		return err
	}
	return validateLeaseToken(p.Token)
}

// defaultRunnableStatuses are the statuses a runnable filter or a claim
// selects when it names none (LEASE-011).
func defaultRunnableStatuses() []runstate.RunStatus {
	return []runstate.RunStatus{runstate.StatusQueued, runstate.StatusWaiting}
}

func joinStatuses(list []runstate.RunStatus) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
