package runstate

import (
	"errors"
	"fmt"
	"strings"
)

// Code is the stable, machine-readable category of an error. Codes are part
// of the contract: an out-of-process adapter carries them across the wire and
// the host rebuilds an *Error with the same code.
type Code string

// Error codes.
const (
	CodeNotFound          Code = "NOT_FOUND"
	CodeAlreadyExists     Code = "ALREADY_EXISTS"
	CodeVersionConflict   Code = "VERSION_CONFLICT"
	CodeInvalidTransition Code = "INVALID_STATE_TRANSITION"
	CodeMissingDiagnostic Code = "MISSING_DIAGNOSTIC"
	CodeInvalidArgument   Code = "INVALID_ARGUMENT"
	CodeLeaseHeld         Code = "LEASE_HELD"
	CodeLeaseLost         Code = "LEASE_LOST"
	CodeNotClaimable      Code = "NOT_CLAIMABLE"
	CodeUnavailable       Code = "UNAVAILABLE"
	CodePermissionDenied  Code = "PERMISSION_DENIED"
	CodeUnauthenticated   Code = "UNAUTHENTICATED"
	CodeUnsupported       Code = "UNSUPPORTED"
)

// Sentinel errors, checked with errors.Is. Every error a store returns for
// one of these conditions matches the sentinel, whatever its details. They
// are values (a Code and nothing more), so no caller can change what one
// matches.
var (
	// ErrNotFound: the run does not exist, or no runnable run matched a claim-next.
	ErrNotFound error = sentinel(CodeNotFound)
	// ErrAlreadyExists: a run with the requested run_id exists already.
	ErrAlreadyExists error = sentinel(CodeAlreadyExists)
	// ErrVersionConflict: the update's expected version is not the current
	// one. Nothing was written; Error.CurrentVersion holds the current version.
	ErrVersionConflict error = sentinel(CodeVersionConflict)
	// ErrInvalidTransition: the transition table does not allow the requested
	// status change (INVALID_STATE_TRANSITION). Error.From and Error.To name it.
	ErrInvalidTransition error = sentinel(CodeInvalidTransition)
	// ErrMissingDiagnostic: entering failed, denied or timeout without a
	// complete Diagnostic, or interrupted without an interrupted_reason.
	ErrMissingDiagnostic error = sentinel(CodeMissingDiagnostic)
	// ErrInvalidArgument: the input is malformed or out of limits; Error.Field names it.
	ErrInvalidArgument error = sentinel(CodeInvalidArgument)
	// ErrLeaseHeld: another owner holds a live lease on the run.
	ErrLeaseHeld error = sentinel(CodeLeaseHeld)
	// ErrLeaseLost: the lease token is not the run's current one, or the lease
	// was released. The caller no longer owns the run.
	ErrLeaseLost error = sentinel(CodeLeaseLost)
	// ErrNotClaimable: the run is terminal, or its status is not among those
	// the claim asked for.
	ErrNotClaimable error = sentinel(CodeNotClaimable)
	// ErrUnavailable: the store cannot serve the call (closed, unreachable,
	// dead plugin). Retrying later may succeed; Unwrap gives the cause.
	ErrUnavailable error = sentinel(CodeUnavailable)
	// ErrPermissionDenied: the store refused the caller's credentials or
	// rights. Retrying with the same credentials will not help.
	ErrPermissionDenied error = sentinel(CodePermissionDenied)
	// ErrUnauthenticated: the call carried no credentials, or ones nobody
	// issued (a store behind a gateway). Retrying needs another credential.
	ErrUnauthenticated error = sentinel(CodeUnauthenticated)
	// ErrUnsupported: the call asks for something the store, or the peer
	// of another version that it crosses to, cannot do without dropping
	// part of it (a principal an older plugin would not record, say).
	// Nothing was written; the message names what, and the versions.
	ErrUnsupported error = sentinel(CodeUnsupported)
)

// Error is the error type of the contract. Only Code decides identity; the
// other fields are details for people and programs.
type Error struct {
	Code    Code
	Message string
	RunID   string
	// Field names the offending input (CodeInvalidArgument).
	Field string
	// From and To name the rejected transition (CodeInvalidTransition).
	// For a step or host they are step statuses and Step/Host say where.
	From, To   string
	Step, Host string
	// ExpectedVersion and CurrentVersion describe a conflict (CodeVersionConflict).
	ExpectedVersion, CurrentVersion int64
	// Cause is the underlying error, if any (for example a driver error).
	Cause error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(errPrefix)
	if e.Message != "" {
		b.WriteString(strings.TrimPrefix(e.Message, errPrefix))
	} else {
		b.WriteString(e.Code.words())
	}
	if e.RunID != "" && !strings.Contains(e.Message, e.RunID) {
		fmt.Fprintf(&b, " (run %s)", e.RunID)
	}
	if e.Cause != nil {
		// A cause that is runstate's own error is not prefixed twice.
		fmt.Fprintf(&b, ": %s", strings.ReplaceAll(e.Cause.Error(), errPrefix, ""))
	}
	return b.String()
}

// errPrefix starts every message of the contract's errors, once.
const errPrefix = "runstate: "

// Is reports whether target is a sentinel or an *Error with the same Code,
// so that errors.Is(err, ErrNotFound) holds for every not-found error.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case sentinel:
		return Code(t) == e.Code
	case *Error:
		return t.Code == e.Code
	}
	return false
}

// sentinel is the type of the Err* values.
type sentinel Code

func (s sentinel) Error() string { return errPrefix + Code(s).words() }

// words is the code as a phrase: "not found".
func (c Code) words() string { return strings.ToLower(strings.ReplaceAll(string(c), "_", " ")) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// CodeOf returns the Code of the first *Error (or sentinel) in err's
// chain, or "" when err is nil or carries no Code.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var s sentinel
	if errors.As(err, &s) {
		return Code(s)
	}
	return ""
}

// InvalidArgument returns an ErrInvalidArgument naming field.
func InvalidArgument(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: "invalid " + field + ": " + fmt.Sprintf(format, args...)}
}

// Unavailable returns an ErrUnavailable wrapping cause.
func Unavailable(what string, cause error) *Error {
	return &Error{Code: CodeUnavailable, Message: what, Cause: cause}
}

// MessageOf returns err's message without the "runstate: " prefix: the
// Message of a runstate *Error, else err.Error().
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Message != "" && e.Cause == nil {
		return strings.TrimPrefix(e.Message, errPrefix)
	}
	return strings.TrimPrefix(err.Error(), errPrefix)
}
