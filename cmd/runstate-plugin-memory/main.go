// Command runstate-plugin-memory serves the in-memory store as a plugin.
// It takes no configuration, and ignores what it is given (hosts that
// configure every plugin alike send some); its data lives as long as the
// process.
package main

import (
	"context"

	"github.com/runstate/runstate"
	_ "github.com/runstate/runstate/adapters/memory" // the memory scheme
	"github.com/runstate/runstate/plugin"
)

func main() {
	open := plugin.SchemeOpener("memory", "")
	plugin.ServeOpener(func(ctx context.Context, _ map[string]string) (runstate.RunStateStore, error) {
		return open(ctx, nil)
	}, plugin.WithName("memory", "builtin"))
}
