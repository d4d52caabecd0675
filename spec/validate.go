package spec

import (
	"strings"
	"time"
	"unicode/utf8"
)

// PrepareCreate validates p and normalises it in place: Status becomes
// queued, an empty RunID becomes a new ULID, an empty actor kind operator.
// Stores call it before reading or writing anything.
func PrepareCreate(p *CreateRunParams) error {
	// A generated ULID, or a valid caller-supplied id (RUN-001, RUN-002, BAD-001).
	if p.RunID == "" {
		p.RunID = NewRunID()
	} else if err := ValidateRunID(p.RunID); err != nil {
		return err
	}
	if err := validateText("workflow_name", p.WorkflowName, MaxWorkflowNameLen, true); err != nil { // BAD-003
		return err
	}
	// Created only as queued, or an alias of it (RUN-007, FSM-006).
	if p.Status != "" {
		st, err := ParseRunStatus(p.Status)
		if err != nil {
			return err
		}
		if st != StatusQueued {
			return InvalidArgument("status", "a run is created as queued, not %s; create it, then update it", st)
		}
	}
	p.Status = string(StatusQueued)
	if err := validateText("message", p.Message, MaxMessageLen, false); err != nil {
		return err
	}
	if err := validatePriority(p.Priority); err != nil {
		return err
	}
	if err := validateLabels("labels", p.Labels); err != nil {
		return err
	}
	if len(p.Steps) > MaxSteps {
		return InvalidArgument("steps", "%d steps, the limit is %d", len(p.Steps), MaxSteps)
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
	if hosts > MaxHostStates {
		return InvalidArgument("hosts", "%d host states in all steps, the limit is %d", hosts, MaxHostStates)
	}
	if p.RetryOf != "" { // BAD-001, RUN-006
		if err := validateToken("retry_of", p.RetryOf, MaxRunIDLen, ""); err != nil {
			return err
		}
		if p.RetryOf == p.RunID {
			return InvalidArgument("retry_of", "a run cannot retry itself")
		}
	}
	if err := prepareActor(&p.Actor); err != nil {
		return err
	}
	return validateText("reason", p.Reason, MaxReasonLen, false)
}

// PrepareUpdate validates p and normalises it in place (status aliases,
// actor kind). It checks the input alone; ApplyUpdate checks it against the run.
// A meaningless update is an ErrInvalidArgument (BAD-007).
func PrepareUpdate(p *UpdateRunParams) error {
	if err := ValidateRunID(p.RunID); err != nil {
		return err
	}
	if p.ExpectedVersion < 1 {
		return InvalidArgument("expected_version", "is %d; every update names the version it was based on (>= 1)", p.ExpectedVersion)
	}
	if p.LeaseToken < 0 {
		return InvalidArgument("lease_token", "is %d; tokens are positive, or 0 for an unfenced write", p.LeaseToken)
	}
	if p.Status != "" {
		st, err := ParseRunStatus(p.Status)
		if err != nil {
			return err
		}
		p.Status = string(st)
	}
	if p.Message != nil {
		if err := validateText("message", *p.Message, MaxMessageLen, false); err != nil {
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
	if err := validateText("interrupted_reason", p.InterruptedReason, MaxReasonLen, false); err != nil {
		return err
	}
	if p.InterruptedReason != "" && RunStatus(p.Status) != StatusInterrupted { // BAD-007
		return InvalidArgument("interrupted_reason", "is only set together with status interrupted")
	}
	if p.Labels != nil {
		if err := validateLabels("labels", p.Labels); err != nil {
			return err
		}
	}
	if len(p.Steps) > MaxSteps {
		return InvalidArgument("steps", "%d step patches, the limit is %d", len(p.Steps), MaxSteps)
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
	if err := validateText("reason", p.Reason, MaxReasonLen, false); err != nil {
		return err
	}
	if p.Status == "" && p.Message == nil && p.Priority == nil && p.Diagnostic == nil &&
		p.Labels == nil && len(p.Steps) == 0 {
		return InvalidArgument("update", "changes nothing; set a status, message, priority, labels, diagnostic or steps")
	}
	return nil
}

func prepareStepPatch(sp *StepPatch, seen map[string]bool) error {
	if err := validateStepName(sp.Name, seen); err != nil {
		return err
	}
	if sp.Status != "" {
		st, err := ParseStepStatus(sp.Status)
		if err != nil {
			return err
		}
		sp.Status = string(st)
	}
	if len(sp.Hosts) > MaxHostsPerStep {
		return InvalidArgument("hosts", "step %q: %d host patches, the limit is %d", sp.Name, len(sp.Hosts), MaxHostsPerStep)
	}
	hosts := make(map[string]bool, len(sp.Hosts))
	for i := range sp.Hosts {
		hp := &sp.Hosts[i]
		if err := validateHostName(sp.Name, hp.Host, hosts); err != nil {
			return err
		}
		if hp.Status != "" {
			st, err := ParseStepStatus(hp.Status)
			if err != nil {
				return err
			}
			hp.Status = string(st)
		}
		if hp.OutputSummary != nil {
			if err := validateText("output_summary", *hp.OutputSummary, MaxHostOutputBytes, false); err != nil {
				return err
			}
		}
		if hp.Error != nil {
			if err := validateText("host error", *hp.Error, MaxHostErrorLen, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// PrepareGet validates a run_id given to GetRun (BAD-001).
func PrepareGet(runID string) error { return ValidateRunID(runID) }

// ValidateOwner checks a lease owner: a non-blank worker (BAD-004).
func ValidateOwner(o Owner) error {
	if err := validateText("owner.worker", o.Worker, MaxOwnerLen, true); err != nil {
		return err
	}
	return validateText("owner.incarnation", o.Incarnation, MaxOwnerLen, false)
}

// ValidateTTL checks a lease duration: positive and at most MaxLeaseTTL (BAD-004).
func ValidateTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return InvalidArgument("ttl", "is %v; a lease lasts a positive duration", ttl)
	}
	if ttl > MaxLeaseTTL {
		return InvalidArgument("ttl", "is %v, the limit is %v", ttl, MaxLeaseTTL)
	}
	return nil
}

// ValidateToken checks a lease token given to renew or release: positive (BAD-004).
func ValidateToken(token int64) error {
	if token <= 0 {
		return InvalidArgument("token", "is %d; lease tokens are positive", token)
	}
	return nil
}

// PrepareAuditQuery validates p and returns the effective page size; a
// negative after_seq or a limit out of range is ErrInvalidArgument (LIST-007).
func PrepareAuditQuery(p ListAuditParams) (limit int, err error) {
	if err := ValidateRunID(p.RunID); err != nil {
		return 0, err
	}
	if p.AfterSeq < 0 {
		return 0, InvalidArgument("after_seq", "is %d; it must be >= 0", p.AfterSeq)
	}
	return pageLimit(p.Limit)
}

// pageLimit resolves a page size: 0 for the default, else 1 to MaxPageLimit (LIST-007).
func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultPageLimit, nil
	case n < 0 || n > MaxPageLimit:
		return 0, InvalidArgument("limit", "is %d; use 1 to %d, or 0 for %d", n, MaxPageLimit, DefaultPageLimit)
	}
	return n, nil
}

// parseStatuses parses a status filter: aliases resolve (FSM-006), unknown
// names are refused (BAD-002), and so are terminal ones where only
// non-terminal runs qualify (LEASE-010).
func parseStatuses(field string, in []string, def []RunStatus, nonTerminalOnly bool) ([]RunStatus, error) {
	if len(in) == 0 {
		return def, nil
	}
	out := make([]RunStatus, 0, len(in))
	for _, s := range in {
		st, err := ParseRunStatus(s)
		if err != nil {
			return nil, unknownStatus(field, s)
		}
		if nonTerminalOnly && st.Terminal() {
			return nil, InvalidArgument(field, "%s is terminal; only queued, running and waiting runs can be claimed", st)
		}
		out = append(out, st)
	}
	return out, nil
}

func validatePriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return InvalidArgument("priority", "is %d; use %d to %d", p, MinPriority, MaxPriority)
	}
	return nil
}

func validateDiagnostic(d *Diagnostic) error {
	if err := validateText("diagnostic.error_code", d.ErrorCode, MaxErrorCodeLen, false); err != nil {
		return err
	}
	if err := validateText("diagnostic.message", d.Message, MaxMessageLen, false); err != nil {
		return err
	}
	if err := validateText("diagnostic.source_step", d.SourceStep, MaxStepNameLen, false); err != nil {
		return err
	}
	if err := validateText("diagnostic.source_host", d.SourceHost, MaxHostNameLen, false); err != nil {
		return err
	}
	if len(d.Details) > MaxDiagnosticDetails {
		return InvalidArgument("diagnostic.details", "%d entries, the limit is %d", len(d.Details), MaxDiagnosticDetails)
	}
	for k, v := range d.Details {
		if err := validateText("diagnostic.details key", k, MaxLabelKeyLen, true); err != nil {
			return err
		}
		if err := validateText("diagnostic.details["+k+"]", v, MaxDetailValueLen, false); err != nil {
			return err
		}
	}
	return nil
}

// diagnosticMissing reports what a Diagnostic lacks to be usable by an
// orchestrator (seed 001: error_code, message, retryable); "" when complete.
// A blank error_code or message is missing (DIAG-002).
func diagnosticMissing(d *Diagnostic) string {
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
	if len(labels) > MaxLabels {
		return InvalidArgument(field, "%d labels, the limit is %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if err := validateToken(field+" key", k, MaxLabelKeyLen, "/"); err != nil {
			return err
		}
		if err := validateText(field+"["+k+"]", v, MaxLabelValueLen, false); err != nil {
			return err
		}
	}
	return nil
}

func validateStepName(name string, seen map[string]bool) error {
	if err := validateText("step name", name, MaxStepNameLen, true); err != nil {
		return err
	}
	if seen[name] { // BAD-007
		return InvalidArgument("steps", "step %q appears twice", name)
	}
	seen[name] = true
	return nil
}

func validateHostNames(step string, hosts []string) error {
	if len(hosts) > MaxHostsPerStep {
		return InvalidArgument("hosts", "step %q has %d hosts, the limit is %d", step, len(hosts), MaxHostsPerStep)
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
	if err := validateText("host name", host, MaxHostNameLen, true); err != nil {
		return err
	}
	if seen[host] {
		return InvalidArgument("hosts", "host %q appears twice in step %q", host, step)
	}
	seen[host] = true
	return nil
}

// prepareActor records an actor without a kind as operator (AUD-008) and
// refuses an unknown kind (BAD-007).
func prepareActor(a *Actor) error {
	switch a.Kind {
	case "":
		a.Kind = ActorOperator
	case ActorWorker, ActorRecovery, ActorOperator:
	default:
		return InvalidArgument("actor.kind", "unknown actor kind %q (want worker, recovery or operator)", a.Kind)
	}
	return validateText("actor.id", a.ID, MaxActorIDLen, false)
}

// validateText checks free text: valid UTF-8 without NUL bytes (BAD-006), at
// most max bytes, and non-blank when required (BAD-005), naming the field.
func validateText(field, s string, max int, required bool) error {
	if required && strings.TrimSpace(s) == "" {
		return InvalidArgument(field, "must not be empty")
	}
	if len(s) > max {
		return InvalidArgument(field, "is %d bytes long, the limit is %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return InvalidArgument(field, "is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return InvalidArgument(field, "contains a NUL byte")
	}
	return nil
}

// TruncateOutput shortens s to at most MaxHostOutputBytes, marking the cut,
// so that a tracker never exceeds the limit.
func TruncateOutput(s string) string { return TruncateText(s, MaxHostOutputBytes) }

// TruncateText shortens s to at most max bytes without splitting a UTF-8
// sequence; a shortened text ends with a mark saying so.
func TruncateText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	mark := "…[truncated]"
	if limit < len(mark) {
		mark = ""
	}
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
