package protocol

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// Conversions between runstate types and their protobuf messages. A zero
// time travels as an absent timestamp, a nil pointer as an absent field.

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func fromTS(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime().UTC()
}

func fromDuration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func actorPB(a runstate.Actor) *pb.Actor {
	return &pb.Actor{Kind: string(a.Kind), Id: a.ID, Principal: a.Principal}
}

func fromActor(a *pb.Actor) runstate.Actor {
	return runstate.Actor{Kind: runstate.ActorKind(a.GetKind()), ID: a.GetId(), Principal: a.GetPrincipal()}
}

func ownerPB(o runstate.Owner) *pb.Owner {
	return &pb.Owner{Worker: o.Worker, Incarnation: o.Incarnation}
}

func fromOwner(o *pb.Owner) runstate.Owner {
	return runstate.Owner{Worker: o.GetWorker(), Incarnation: o.GetIncarnation()}
}

func diagnosticPB(d *runstate.Diagnostic) *pb.Diagnostic {
	if d == nil {
		return nil
	}
	return &pb.Diagnostic{ErrorCode: d.ErrorCode, Message: d.Message, Retryable: d.Retryable,
		SourceStep: d.SourceStep, SourceHost: d.SourceHost, Details: d.Details}
}

func fromDiagnostic(d *pb.Diagnostic) *runstate.Diagnostic {
	if d == nil {
		return nil
	}
	return &runstate.Diagnostic{ErrorCode: d.ErrorCode, Message: d.Message, Retryable: d.Retryable,
		SourceStep: d.SourceStep, SourceHost: d.SourceHost, Details: emptyNil(d.Details)}
}

// emptyNil keeps the spec's convention that an absent map is nil.
func emptyNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func runPB(s runstate.RunSnapshot) *pb.Run {
	r := &pb.Run{RunId: s.RunID, WorkflowName: s.WorkflowName, Status: string(s.Status), Message: s.Message,
		Priority: int64(s.Priority), Labels: s.Labels, CreatedAt: ts(s.CreatedAt), UpdatedAt: ts(s.UpdatedAt),
		StartedAt: ts(s.StartedAt), FinishedAt: ts(s.FinishedAt), Version: s.Version, Diagnostic: diagnosticPB(s.Diagnostic),
		InterruptedReason: s.InterruptedReason, RetryOf: s.RetryOf, Attempt: int64(s.Attempt), WakeAt: ts(s.WakeAt)}
	for _, st := range s.Steps {
		step := &pb.Step{Name: st.Name, Status: string(st.Status), StartedAt: ts(st.StartedAt), FinishedAt: ts(st.FinishedAt)}
		for _, h := range st.Hosts {
			step.Hosts = append(step.Hosts, &pb.HostState{Host: h.Host, Status: string(h.Status), OutputSummary: h.OutputSummary,
				Error: h.Error, StartedAt: ts(h.StartedAt), FinishedAt: ts(h.FinishedAt)})
		}
		r.Steps = append(r.Steps, step)
	}
	return r
}

func fromRun(r *pb.Run) runstate.RunSnapshot {
	s := runstate.RunSnapshot{RunID: r.RunId, WorkflowName: r.WorkflowName, Status: runstate.RunStatus(r.Status), Message: r.Message,
		Priority: int(r.Priority), Labels: emptyNil(r.Labels), CreatedAt: fromTS(r.CreatedAt), UpdatedAt: fromTS(r.UpdatedAt),
		StartedAt: fromTS(r.StartedAt), FinishedAt: fromTS(r.FinishedAt), Version: r.Version, Diagnostic: fromDiagnostic(r.Diagnostic),
		InterruptedReason: r.InterruptedReason, RetryOf: r.RetryOf, Attempt: int(r.Attempt), WakeAt: fromTS(r.WakeAt)}
	for _, st := range r.Steps {
		step := runstate.Step{Name: st.Name, Status: runstate.StepStatus(st.Status), StartedAt: fromTS(st.StartedAt), FinishedAt: fromTS(st.FinishedAt)}
		for _, h := range st.Hosts {
			step.Hosts = append(step.Hosts, runstate.HostState{Host: h.Host, Status: runstate.StepStatus(h.Status), OutputSummary: h.OutputSummary,
				Error: h.Error, StartedAt: fromTS(h.StartedAt), FinishedAt: fromTS(h.FinishedAt)})
		}
		s.Steps = append(s.Steps, step)
	}
	return s
}

func runPagePB(p runstate.RunPage) *pb.RunPage {
	out := &pb.RunPage{NextCursor: p.NextCursor}
	for _, r := range p.Runs {
		out.Runs = append(out.Runs, runPB(r))
	}
	return out
}

func fromRunPage(p *pb.RunPage) runstate.RunPage {
	out := runstate.RunPage{NextCursor: p.NextCursor}
	for _, r := range p.Runs {
		out.Runs = append(out.Runs, fromRun(r))
	}
	return out
}

func eventPB(e runstate.AuditEvent) *pb.AuditEvent {
	return &pb.AuditEvent{RunId: e.RunID, Seq: e.Seq, Kind: string(e.Kind), From: string(e.From), To: string(e.To),
		Time: ts(e.Time), Actor: actorPB(e.Actor), Reason: e.Reason, ErrorCode: e.ErrorCode, Version: e.Version,
		LeaseToken: e.LeaseToken}
}

func fromEvent(e *pb.AuditEvent) runstate.AuditEvent {
	return runstate.AuditEvent{RunID: e.RunId, Seq: e.Seq, Kind: runstate.AuditKind(e.Kind), From: runstate.RunStatus(e.From),
		To: runstate.RunStatus(e.To), Time: fromTS(e.Time), Actor: fromActor(e.Actor), Reason: e.Reason, ErrorCode: e.ErrorCode, Version: e.Version,
		LeaseToken: e.LeaseToken}
}

func leasePB(l runstate.Lease) *pb.Lease {
	return &pb.Lease{RunId: l.RunID, Owner: ownerPB(l.Owner), Token: l.Token, AcquiredAt: ts(l.AcquiredAt), ExpiresAt: ts(l.ExpiresAt)}
}

func fromLease(l *pb.Lease) runstate.Lease {
	return runstate.Lease{RunID: l.GetRunId(), Owner: fromOwner(l.GetOwner()), Token: l.GetToken(),
		AcquiredAt: fromTS(l.GetAcquiredAt()), ExpiresAt: fromTS(l.GetExpiresAt())}
}

func claimPB(c runstate.Claim) *pb.Claim {
	return &pb.Claim{Lease: leasePB(c.Lease), Run: runPB(c.Run)}
}

func fromClaim(c *pb.Claim) runstate.Claim {
	return runstate.Claim{Lease: fromLease(c.GetLease()), Run: fromRun(c.GetRun())}
}

func createPB(p runstate.CreateRunParams) *pb.CreateRunRequest {
	r := &pb.CreateRunRequest{RunId: p.RunID, WorkflowName: p.WorkflowName, Status: p.Status, Message: p.Message,
		Priority: int64(p.Priority), Labels: p.Labels, RetryOf: p.RetryOf, Actor: actorPB(p.Actor), Reason: p.Reason}
	for _, st := range p.Steps {
		r.Steps = append(r.Steps, &pb.StepSpec{Name: st.Name, Hosts: st.Hosts})
	}
	return r
}

func fromCreate(r *pb.CreateRunRequest) runstate.CreateRunParams {
	p := runstate.CreateRunParams{RunID: r.RunId, WorkflowName: r.WorkflowName, Status: r.Status, Message: r.Message,
		Priority: int(r.Priority), Labels: emptyNil(r.Labels), RetryOf: r.RetryOf, Actor: fromActor(r.Actor), Reason: r.Reason}
	for _, st := range r.Steps {
		p.Steps = append(p.Steps, runstate.StepSpec{Name: st.Name, Hosts: st.Hosts})
	}
	return p
}

func updatePB(p runstate.UpdateRunParams) *pb.UpdateRunRequest {
	r := &pb.UpdateRunRequest{RunId: p.RunID, ExpectedVersion: p.ExpectedVersion, LeaseToken: p.LeaseToken, Status: p.Status,
		Message: p.Message, Diagnostic: diagnosticPB(p.Diagnostic), InterruptedReason: p.InterruptedReason,
		SetLabels: p.Labels != nil, Labels: p.Labels, Actor: actorPB(p.Actor), Reason: p.Reason, ReleaseLease: p.ReleaseLease}
	if p.Priority != nil {
		v := int64(*p.Priority)
		r.Priority = &v
	}
	if p.WakeAt != nil {
		r.SetWakeAt, r.WakeAt = true, ts(*p.WakeAt)
	}
	for _, sp := range p.Steps {
		step := &pb.StepPatch{Name: sp.Name, Status: sp.Status}
		for _, h := range sp.Hosts {
			step.Hosts = append(step.Hosts, &pb.HostPatch{Host: h.Host, Status: h.Status, OutputSummary: h.OutputSummary, Error: h.Error})
		}
		r.Steps = append(r.Steps, step)
	}
	return r
}

func fromUpdate(r *pb.UpdateRunRequest) runstate.UpdateRunParams {
	p := runstate.UpdateRunParams{RunID: r.RunId, ExpectedVersion: r.ExpectedVersion, LeaseToken: r.LeaseToken, Status: r.Status,
		Message: r.Message, Diagnostic: fromDiagnostic(r.Diagnostic), InterruptedReason: r.InterruptedReason,
		Actor: fromActor(r.Actor), Reason: r.Reason, ReleaseLease: r.ReleaseLease}
	if r.Priority != nil {
		v := int(*r.Priority)
		p.Priority = &v
	}
	if r.SetWakeAt {
		wake := fromTS(r.WakeAt)
		p.WakeAt = &wake
	}
	if r.SetLabels {
		p.Labels = r.Labels
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
	}
	for _, sp := range r.Steps {
		step := runstate.StepPatch{Name: sp.Name, Status: sp.Status}
		for _, h := range sp.Hosts {
			step.Hosts = append(step.Hosts, runstate.HostPatch{Host: h.Host, Status: h.Status, OutputSummary: h.OutputSummary, Error: h.Error})
		}
		p.Steps = append(p.Steps, step)
	}
	return p
}

func filterPB(f runstate.RunnableFilter) *pb.RunnableFilter {
	return &pb.RunnableFilter{Statuses: f.Statuses, WorkflowName: f.WorkflowName, Labels: f.Labels}
}

func fromFilter(f *pb.RunnableFilter) runstate.RunnableFilter {
	return runstate.RunnableFilter{Statuses: f.GetStatuses(), WorkflowName: f.GetWorkflowName(), Labels: emptyNil(f.GetLabels())}
}

func claimRunsPB(p runstate.ClaimRunsParams) *pb.ClaimRunsRequest {
	return &pb.ClaimRunsRequest{Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Filter: filterPB(p.Filter), Max: int64(p.Max),
		Start: p.Start, Actor: actorPB(p.Actor), Reason: p.Reason}
}

func fromClaimRuns(r *pb.ClaimRunsRequest) runstate.ClaimRunsParams {
	return runstate.ClaimRunsParams{Owner: fromOwner(r.Owner), TTL: fromDuration(r.Ttl), Filter: fromFilter(r.Filter),
		Max: int(r.Max), Start: r.Start, Actor: fromActor(r.Actor), Reason: r.Reason}
}
