package memory

import (
	"context"

	"github.com/runstate/runstate"
)

// The memory store opens by the name "memory" (runstate.OpenStore).
func init() {
	runstate.RegisterScheme(runstate.StoreScheme{Name: "memory", Open: openNamed})
}

func openNamed(ctx context.Context, _ runstate.StoreName, opts runstate.OpenOptions) (*runstate.OpenedStore, error) {
	opts.Log().Warn("using the memory store: it is not persistent, runs are lost when this process exits", "store", "memory")
	s, err := Open(ctx, Options{})
	if err != nil {
		return nil, err
	}
	return &runstate.OpenedStore{Runs: s, Close: s.Close}, nil
}
