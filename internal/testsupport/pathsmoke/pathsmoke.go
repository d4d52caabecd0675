// Package pathsmoke names the rules a path (a plugin process, a gateway
// process) runs with a store whose whole suite runs elsewhere.
//
// A path's code is the same whichever store is behind it, so each path
// runs the whole suite with one store in both clock modes, and each store
// runs it in-process (docs/testing.md). What a path adds for every other
// store is its wiring: the binary or gateway opens the store from its
// configuration, creates and moves runs, claims under leases, and keeps an
// acknowledged write across a kill of the process in between. These rules
// show exactly that, in seconds.
package pathsmoke

// Rules: a run created and read; every allowed transition; a lease that
// excludes another owner; claim-next by racing workers; acknowledged
// writes that outlive a restart (for a target that declares restarts; it
// skips, saying so, for one that does not).
var Rules = []string{"RUN-001", "FSM-001", "LEASE-001", "LEASE-002", "FAULT-003"}
