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
// What a store can do beyond [RunStateStore] (its lease side, batches,
// watches) are its [Features], which every store tells through a method of
// RunStateStore and a caller reaches with [As]. They are not found by type
// assertion: Go composes a method set only by type, so every layer between
// a caller and a store (the kit's checks, a plugin's or a gateway's
// client, OpenTelemetry, a user's struct that embeds a store to add a
// method) would have to spell out each optional interface again, in every
// combination, and one that did not would drop a feature without a word.
// A method of the interface itself travels through embedding; a layer that
// changes calls starts from the features below it and replaces what it
// changes, so a feature added later passes through every layer written
// before it. This is Go CDK's way: a concrete collection asks the driver
// below at call time. We chose it over one concrete handle type because a
// store is an interface here, held and wrapped as one by users and by
// this module's own packages, and the features method keeps that.
//
// Errors are *[Error] values with a stable [Code]; compare them with
// errors.Is against the Err* sentinels, never by message text.
package runstate
