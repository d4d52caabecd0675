package driver

import (
	"github.com/oklog/ulid/v2"

	"github.com/runstate/runstate"
)

// newRunID returns a new ULID: unique, and sortable by creation time.
// ulid.Make is safe for concurrent use and monotonic within a process (RUN-001).
func newRunID() string { return ulid.Make().String() }

// validateRunID checks a caller-supplied run_id: 1 to runstate.MaxRunIDLen characters
// of A-Z a-z 0-9 . _ : - (RUN-002, BAD-001)
func validateRunID(id string) error { return validateToken("run_id", id, runstate.MaxRunIDLen, "") }

// validateToken checks a restricted identifier: non-empty, at most max bytes,
// only ASCII letters, digits, '.', '_', ':', '-' and the extra characters.
func validateToken(field, s string, max int, extra string) error {
	if s == "" {
		return runstate.InvalidArgument(field, "must not be empty")
	}
	if len(s) > max {
		return runstate.InvalidArgument(field, "is %d characters long, the limit is %d", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			if !containsByte(extra, c) {
				return runstate.InvalidArgument(field, "%q contains %q at offset %d; allowed are A-Z a-z 0-9 . _ : -%s", s, rune(c), i, extra)
			}
		}
	}
	return nil
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
