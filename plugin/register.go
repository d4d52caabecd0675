package plugin

import (
	"context"
	"maps"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/stores"
)

// A plugin store opens by the name "plugin:PATH" (stores.Open),
// configured by stores.Options.Plugin.
func init() {
	stores.Register(stores.Scheme{
		Name: "plugin", Arg: "PATH", ArgMeans: "the plugin binary", Example: "plugin:./runstate-plugin-badger",
		Open: openNamed,
	})
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	log := opts.Log()
	c, err := Open(ctx, name.Arg, Options{Config: opts.Plugin.Config, Logger: log, Relaunch: opts.Plugin.Relaunch,
		AcceptNoPrincipal: opts.Plugin.AcceptNoPrincipal})
	if err != nil {
		return nil, err
	}
	log.Info("using store", "store", "plugin", "path", name.Arg, "plugin", c.Name(), "version", c.Version(),
		"config", Redacted(opts.Plugin.Config, nil))
	if c.Name() == "memory" {
		log.Warn("the plugin keeps runs in memory: they are lost when the plugin exits")
	}
	return &stores.Opened{Runs: c.Store(), Close: c.Close, Watch: c.Watcher(), WatchRuns: c.RunWatcher()}, nil
}

// SchemeOpener returns the Opener of a plugin that serves a store of a
// scheme registered with stores.Register: the configuration key
// argKey gives the store name's argument (none when empty), and the other
// keys are the scheme's settings. A plugin's configuration and a --store
// name are then read by the same code.
func SchemeOpener(scheme, argKey string) Opener {
	return func(ctx context.Context, config map[string]string) (runstate.RunStateStore, error) {
		s, ok := stores.Lookup(scheme)
		if !ok {
			return nil, runstate.InvalidArgument("store", "no store scheme %q is registered in this plugin", scheme)
		}
		var required []string
		name := scheme
		settings := maps.Clone(config)
		if argKey != "" {
			required = []string{argKey}
			name += ":" + config[argKey]
			delete(settings, argKey)
		}
		if err := CheckConfig(config, required, s.Settings); err != nil {
			return nil, err
		}
		opened, err := stores.Open(ctx, name, stores.Options{Settings: settings, Clock: TestClock(ctx)})
		if err != nil {
			return nil, err
		}
		return opened.Runs, nil
	}
}
