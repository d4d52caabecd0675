// Package driver is the store author's side of runstate, as database/sql/driver
// is to database/sql: implement [Driver], the storage (an atomic
// read-modify-write of one run, indexed listings and the claim candidate
// search), and [Wrap] makes it a runstate.Store that honours every rule of
// docs/spec.md. The kit does the rest once, for every store:
//
//   - the context check and the validation and normalisation of input;
//   - the decisions: FSM, compare-and-set, fencing, diagnostics, the lease
//     rules ([LeaseState] holds what a store keeps of a lease);
//   - the audit events and their numbering;
//   - paging and cursors;
//   - claim-next, over the driver's candidates, unless the driver claims in
//     one step of its own ([NextClaimer]);
//   - the contract's errors, with driver errors that carry no runstate.Code
//     mapped to runstate.ErrUnavailable;
//   - group commit: concurrent single writes coalesced into one write of
//     the driver's batch interfaces ([GroupCommit], configured by
//     [WrapWith]).
//
// A driver says which parts of the run's layout it keeps beyond those every
// driver keeps ([Keeper], [Keeps]: parked runs first), and Wrap refuses a
// write that needs a part it does not name, with runstate.ErrUnsupported,
// rather than accept it and lose it: a driver compiled against a later kit
// keeps the meaning it was written with.
//
// A store that implements runstate.Store directly (from docs/spec.md, or in
// another language behind the plugin protocol) needs none of this; [Checked]
// gives it the kit's validation alone. Package conformance tests either kind
// through runstate.Store.
package driver
