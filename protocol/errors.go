package protocol

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// grpcCodes gives each contract code the gRPC code closest in meaning, for
// tools that only look at the status; identity travels in ErrorDetail.
var grpcCodes = map[runstate.Code]codes.Code{
	runstate.CodeNotFound:          codes.NotFound,
	runstate.CodeAlreadyExists:     codes.AlreadyExists,
	runstate.CodeVersionConflict:   codes.Aborted,
	runstate.CodeInvalidTransition: codes.FailedPrecondition,
	runstate.CodeMissingDiagnostic: codes.FailedPrecondition,
	runstate.CodeInvalidArgument:   codes.InvalidArgument,
	runstate.CodeLeaseHeld:         codes.FailedPrecondition,
	runstate.CodeLeaseLost:         codes.FailedPrecondition,
	runstate.CodeNotClaimable:      codes.FailedPrecondition,
	runstate.CodeUnavailable:       codes.Unavailable,
	runstate.CodePermissionDenied:  codes.PermissionDenied,
	runstate.CodeUnauthenticated:   codes.Unauthenticated,
	runstate.CodeUnsupported:       codes.FailedPrecondition,
}

// Status returns the gRPC status error that carries err across the wire
// with its identity (code and details), as the protocol's Service answers;
// a client rebuilds the *runstate.Error from it (FromStatus). Servers that
// answer before the Service does (a gateway's interceptors) use it too.
func Status(err error) error { return toStatus(err) }

// FromStatus rebuilds the contract error a status of the protocol carries;
// peer names the other side in messages.
func FromStatus(err error, peer string) error {
	return fromStatus(err, peer, func() bool { return false })
}

// toStatus turns a store's error into the gRPC status the Service returns.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	d := errorDetail(err)
	code, ok := grpcCodes[runstate.Code(d.Code)]
	if !ok {
		code = codes.Unknown
	}
	return mustDetail(status.New(code, wireText(err.Error())), d)
}

// errorDetail is err as it crosses the wire: a contract error with its
// fields, a *runstate.BatchItemError with its index, the context's errors
// by name (for items, which no status carries), anything else as its text
// alone (it stays untyped on the client too: runstate.CodeOf gives "").
func errorDetail(err error) *pb.ErrorDetail {
	var item *runstate.BatchItemError
	if errors.As(err, &item) {
		d := errorDetail(item.Err)
		index := int64(item.Index)
		d.BatchIndex = &index
		return d
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &pb.ErrorDetail{Message: wireText(err.Error()), Context: contextCanceled}
	case errors.Is(err, context.DeadlineExceeded):
		return &pb.ErrorDetail{Message: wireText(err.Error()), Context: contextDeadline}
	}
	var se *runstate.Error
	if !errors.As(err, &se) && runstate.CodeOf(err) != "" {
		// A bare sentinel (perhaps wrapped): its code is its identity.
		se = &runstate.Error{Code: runstate.CodeOf(err), Message: strings.TrimPrefix(err.Error(), "runstate: ")}
	}
	if se == nil {
		return &pb.ErrorDetail{Message: wireText(err.Error())}
	}
	d := &pb.ErrorDetail{Code: wireText(string(se.Code)), Message: wireText(se.Message), RunId: wireText(se.RunID),
		Field: wireText(se.Field), From: wireText(se.From), To: wireText(se.To), Step: wireText(se.Step), Host: wireText(se.Host),
		ExpectedVersion: se.ExpectedVersion, CurrentVersion: se.CurrentVersion}
	if se.Cause != nil {
		d.Cause = wireText(se.Cause.Error())
	}
	return d
}

// The names of the context's errors in ErrorDetail.context.
const (
	contextCanceled = "canceled"
	contextDeadline = "deadline_exceeded"
)

// fromErrorDetail rebuilds the error d carries; peer names the other side
// in messages of errors without a contract code.
func fromErrorDetail(d *pb.ErrorDetail, peer string) error {
	var err error
	switch {
	case d.Context == contextCanceled:
		err = fmt.Errorf("%s: %w", peer, context.Canceled)
	case d.Context == contextDeadline:
		err = fmt.Errorf("%s: %w", peer, context.DeadlineExceeded)
	case d.Code == "":
		err = fmt.Errorf("%s: %s", peer, d.Message)
	default:
		e := &runstate.Error{Code: runstate.Code(d.Code), Message: d.Message, RunID: d.RunId, Field: d.Field, From: d.From, To: d.To,
			Step: d.Step, Host: d.Host, ExpectedVersion: d.ExpectedVersion, CurrentVersion: d.CurrentVersion}
		if d.Cause != "" {
			e.Cause = errors.New(d.Cause)
		}
		err = e
	}
	if d.BatchIndex != nil {
		return &runstate.BatchItemError{Index: int(*d.BatchIndex), Err: err}
	}
	return err
}

// wireText makes s sendable: protobuf strings must be valid UTF-8, and an
// error whose text is not (a driver echoing a raw byte, say) must still
// arrive as itself, with the bad bytes replaced.
func wireText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// mustDetail attaches d to st. With wireText's input it cannot fail; if it
// ever did, the status alone still carries the gRPC code, never success.
func mustDetail(st *status.Status, d *pb.ErrorDetail) error {
	withDetail, err := st.WithDetails(d)
	if err != nil {
		return st.Err()
	}
	return withDetail.Err()
}

// fromStatus rebuilds, on the client, the error the server returned. peer
// names the other side in messages ("plugin memory"); gone reports whether
// the server is gone for good (a plugin process that exited).
func fromStatus(err error, peer string, gone func() bool) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*pb.ErrorDetail); ok {
			return fromErrorDetail(ed, peer)
		}
	}
	switch st.Code() {
	case codes.Unauthenticated: // refused before any server code ran, without details
		return &runstate.Error{Code: runstate.CodeUnauthenticated, Message: peer + ": " + st.Message()}
	case codes.PermissionDenied:
		return &runstate.Error{Code: runstate.CodePermissionDenied, Message: peer + ": " + st.Message()}
	case codes.Canceled:
		return fmt.Errorf("%s: %w", peer, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", peer, context.DeadlineExceeded)
	}
	if gone() {
		return runstate.Unavailable(peer+" has exited", err)
	}
	if st.Code() == codes.Unavailable {
		return runstate.Unavailable(peer+" is unreachable", err)
	}
	return fmt.Errorf("%s: %w", peer, err)
}
