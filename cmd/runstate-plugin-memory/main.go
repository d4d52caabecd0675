// Command runstate-plugin-memory serves the in-memory store as a plugin.
// It takes no configuration; its data lives as long as the process.
package main

import (
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/plugin"
)

func main() { plugin.Serve(memory.New(), plugin.WithName("memory", "builtin")) }
