// Package spec is the contract every runstate store honours.
//
// A store keeps one snapshot per run, keyed by run_id, together with the
// run's audit trail and, when it implements [LeaseStore], the lease that says
// which worker may execute the run. The contract lives in the doc comments of
// the interfaces and types in this package; docs/spec.md restates it as
// numbered rules, and package conformance checks every rule against a store.
//
// Semantics that do not depend on the storage medium are implemented here
// once, so that adapters only store and fetch:
//
//   - [PrepareCreate], [PrepareUpdate] and the other Prepare functions check
//     input (and fill in defaults) before a store touches its data.
//   - [NewRun] builds the first snapshot and audit event of a run.
//   - [ApplyUpdate] decides the outcome of an update against the current
//     snapshot: the new snapshot, its audit events and the error to return.
//   - [LeaseState] holds the lease rules: who may claim, which token fences.
//   - [Recover] performs crash recovery using only the interfaces.
//
// Errors are *[Error] values with a stable [Code]; compare them with
// errors.Is against the Err* sentinels, never by message text.
package spec
