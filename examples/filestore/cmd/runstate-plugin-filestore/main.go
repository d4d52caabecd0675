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
	plugin.ServeOpener(func(_ context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"path"}, nil); err != nil {
			return nil, err
		}
		return filestore.Open(cfg["path"])
	}, plugin.WithName("filestore", "0.1.0"))
}
