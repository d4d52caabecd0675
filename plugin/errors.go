package plugin

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/runstate/runstate/plugin/proto"
	"github.com/runstate/runstate/spec"
)

// grpcCodes gives each contract code the gRPC code closest in meaning, for
// tools that only look at the status; identity travels in ErrorDetail.
var grpcCodes = map[spec.Code]codes.Code{
	spec.CodeNotFound:          codes.NotFound,
	spec.CodeAlreadyExists:     codes.AlreadyExists,
	spec.CodeVersionConflict:   codes.Aborted,
	spec.CodeInvalidTransition: codes.FailedPrecondition,
	spec.CodeMissingDiagnostic: codes.FailedPrecondition,
	spec.CodeInvalidArgument:   codes.InvalidArgument,
	spec.CodeLeaseHeld:         codes.FailedPrecondition,
	spec.CodeLeaseLost:         codes.FailedPrecondition,
	spec.CodeNotClaimable:      codes.FailedPrecondition,
	spec.CodeUnavailable:       codes.Unavailable,
	spec.CodePermissionDenied:  codes.PermissionDenied,
}

// toStatus turns a store's error into the gRPC status the plugin returns.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	var se *spec.Error
	if !errors.As(err, &se) {
		// Not a contract error: its text is all there is; it stays untyped
		// on the host too (spec.CodeOf gives "").
		st, _ := status.New(codes.Unknown, err.Error()).WithDetails(&pb.ErrorDetail{Message: err.Error()})
		return st.Err()
	}
	code, ok := grpcCodes[se.Code]
	if !ok {
		code = codes.Unknown
	}
	d := &pb.ErrorDetail{Code: string(se.Code), Message: se.Message, RunId: se.RunID, Field: se.Field, From: se.From, To: se.To,
		Step: se.Step, Host: se.Host, ExpectedVersion: se.ExpectedVersion, CurrentVersion: se.CurrentVersion}
	if se.Cause != nil {
		d.Cause = se.Cause.Error()
	}
	st, derr := status.New(code, se.Error()).WithDetails(d)
	if derr != nil {
		return status.Error(code, se.Error())
	}
	return st.Err()
}

// fromStatus rebuilds, on the host, the error a plugin returned. dead
// reports whether the plugin process has exited.
func fromStatus(err error, plugin string, dead func() bool) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*pb.ErrorDetail); ok {
			if ed.Code == "" {
				return fmt.Errorf("plugin %s: %s", plugin, ed.Message)
			}
			e := &spec.Error{Code: spec.Code(ed.Code), Message: ed.Message, RunID: ed.RunId, Field: ed.Field, From: ed.From, To: ed.To,
				Step: ed.Step, Host: ed.Host, ExpectedVersion: ed.ExpectedVersion, CurrentVersion: ed.CurrentVersion}
			if ed.Cause != "" {
				e.Cause = errors.New(ed.Cause)
			}
			return e
		}
	}
	switch st.Code() {
	case codes.Canceled:
		return fmt.Errorf("plugin %s: %w", plugin, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("plugin %s: %w", plugin, context.DeadlineExceeded)
	}
	if dead() {
		return spec.Unavailable(fmt.Sprintf("plugin %s has exited", plugin), err)
	}
	if st.Code() == codes.Unavailable {
		return spec.Unavailable(fmt.Sprintf("plugin %s is unreachable", plugin), err)
	}
	return fmt.Errorf("plugin %s: %w", plugin, err)
}
