// Command runstate-plugin-memory serves the in-memory store as a plugin.
// It takes no configuration; its data lives as long as the process.
package main

import (
	"context"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(func(ctx context.Context, _ map[string]string) (runstate.RunStateStore, error) {
		return memory.Open(ctx, memory.Options{})
	}, plugin.WithName("memory", "builtin"))
}
