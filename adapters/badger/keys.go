package badger

import "github.com/runstate/runstate/adapters/internal/kvindex"

// The key layout is kvindex's with no prefix: the store owns its
// directory. Badger keeps a run's lease apart from its snapshot (l 0
// <run_id>), so that a lease-only write rewrites only the lease.
var layout kvindex.Layout

// schemaVersion is stored under m 0 schema; Open refuses a directory written
// with a layout it does not know. Version 3 added the parked index (p);
// Open moves a directory of version 2, which has no parked runs, to 3, so
// that an older build refuses it rather than misread a parked run.
const (
	schemaVersion       = "3"
	schemaBeforeParking = "2"
)
