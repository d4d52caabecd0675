// Package runstate is the contract every runstate store honours, as users of a
// store program against it.
//
// A store keeps one snapshot per run, keyed by run_id, together with the
// run's audit trail and, when it implements [LeaseStore], the lease that says
// which worker may execute the run. The contract lives in the doc comments of
// the interfaces and types in this package; docs/spec.md restates it as
// numbered rules, and package conformance checks every rule against a store.
// [Recover] performs crash recovery on any store, using only the interfaces.
//
// Store authors implement the storage alone, in package driver, whose
// Wrap does the rest for every store: validation, the decisions of the
// state machine, compare-and-set, fencing and leases, audit events, paging
// and the errors.
//
// A program opens a store by name with package stores (stores.Open) —
// memory, badger:PATH, mysql:DSN, postgres:DSN, etcd:ENDPOINTS, plugin:PATH,
// gateway:HOST:PORT — once the packages of the kinds it offers are
// imported: each registers its scheme (stores.Register), as database/sql
// drivers register themselves.
//
// Errors are *[Error] values with a stable [Code]; compare them with
// errors.Is against the Err* sentinels, never by message text.
package runstate
