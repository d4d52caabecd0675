// Command runstate-plugin-badger serves a Badger store as a plugin.
// Configuration: dir (required), nosync ("true" to skip fsync; see docs/badger.md).
package main

import (
	"context"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"dir"}, []string{"nosync"}); err != nil {
			return nil, err
		}
		return badger.Open(ctx, badger.Options{Dir: cfg["dir"], NoSync: cfg["nosync"] == "true"})
	}, plugin.WithName("badger", "badger/v4"))
}
