// Command runstate-plugin-badger serves a Badger store as a plugin.
// Configuration: dir (required), nosync ("true" to skip fsync; see docs/badger.md).
package main

import (
	"context"

	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/spec"
)

func main() {
	plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (spec.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"dir"}, []string{"nosync"}); err != nil {
			return nil, err
		}
		return badger.Open(ctx, badger.Options{Dir: cfg["dir"], NoSync: cfg["nosync"] == "true"})
	}, plugin.WithName("badger", "badger/v4"))
}
