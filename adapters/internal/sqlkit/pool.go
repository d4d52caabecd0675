package sqlkit

import "github.com/runstate/runstate/driver"

// poolSize is the pool's size for an Options.MaxOpenConns.
func poolSize(maxOpen int) int {
	if maxOpen <= 0 {
		return 32
	}
	return maxOpen
}

// GroupCommit is the kit's group commit for a SQL store of a pool of
// maxOpen connections: g as given when set, else on with a quarter of the
// pool's connections in flight (at least two, where the pool has two). More than one write in
// flight keeps a write that waits for a row lock held elsewhere from
// holding up every other write of the process (lease renewals among them);
// a quarter still leaves the writes that arrive meanwhile to share.
func GroupCommit(g driver.GroupCommit, maxOpen int) driver.GroupCommit {
	if g.MaxInFlight == 0 {
		pool := poolSize(maxOpen)
		g.MaxInFlight = max(min(2, pool), pool/4)
	}
	return g
}
