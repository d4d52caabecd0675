// Command runstate-plugin-filestore serves a filestore as a runstate
// plugin. Configuration: path, the JSON file (created when missing).
package main

import (
	"context"

	"example.com/filestore"
	"github.com/runstate/runstate"
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"path"}, nil); err != nil {
			return nil, err
		}
		// The test clock, when the runner opened the plugin to certify it.
		return filestore.Open(filestore.Options{Path: cfg["path"], Clock: plugin.TestClock(ctx)})
	}, plugin.WithName("filestore", "0.1.0"))
}
