package memory

import (
	"context"

	"github.com/runstate/runstate/stores"
)

// The memory store opens by the name "memory" (stores.Open).
func init() {
	stores.Register(stores.Scheme{Name: "memory", Open: openNamed})
}

func openNamed(ctx context.Context, _ stores.Name, opts stores.Options) (*stores.Opened, error) {
	opts.Log().Warn("using the memory store: it is not persistent, runs are lost when this process exits", "store", "memory")
	s, err := Open(ctx, Options{Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}
