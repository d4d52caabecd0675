// Command runstate-plugin-filestore serves a filestore as a runstate
// plugin. Configuration: path, the JSON file (created when missing).
package main

import (
	"context"

	"example.com/filestore"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/spec"
)

func main() {
	plugin.ServeOpener(func(_ context.Context, cfg map[string]string) (spec.RunStateStore, error) {
		if err := plugin.CheckConfig(cfg, []string{"path"}, nil); err != nil {
			return nil, err
		}
		return filestore.Open(cfg["path"])
	}, plugin.WithName("filestore", "0.1.0"))
}
