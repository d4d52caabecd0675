package runstate

import "time"

// Size limits. Stores reject larger input with ErrInvalidArgument (BAD-005); they never
// truncate silently. (A tracker cuts host output to size with tracker.Truncate
// before writing.) Lengths are in bytes of UTF-8 text.
const (
	MaxRunIDLen        = 128
	MaxWorkflowNameLen = 256
	MaxMessageLen      = 4096
	MaxReasonLen       = 1024
	MaxLabels          = 32
	MaxLabelKeyLen     = 63
	MaxLabelValueLen   = 256
	MaxSteps           = 256
	MaxHostsPerStep    = 256
	// MaxHostStates bounds the hosts of all steps of a run together, so that
	// a snapshot stays a few MiB at most and fits one write of every store.
	MaxHostStates        = 1024
	MaxStepNameLen       = 256
	MaxHostNameLen       = 256
	MaxHostOutputBytes   = 4096
	MaxHostErrorLen      = 1024
	MaxErrorCodeLen      = 128
	MaxDiagnosticDetails = 32
	MaxDetailValueLen    = 1024
	MaxOwnerLen          = 256
	MaxActorIDLen        = 256

	// MinPriority and MaxPriority bound Priority; larger runs first.
	MinPriority = -1_000_000
	MaxPriority = 1_000_000

	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// MaxCursorLen bounds a cursor a store issues: what it holds is the
	// store's own (the kit's, or a plugin's of any language), opaque to its
	// callers and to every layer between them.
	MaxCursorLen = 1024

	// MaxBatchItems bounds the items of one batch call (creates, updates,
	// or claims), so that a batch stays one bounded write (BATCH-009).
	MaxBatchItems = 1000

	// MaxLeaseTTL bounds a lease's duration; any positive duration up to it is valid (BAD-004).
	MaxLeaseTTL = 24 * time.Hour
)

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
