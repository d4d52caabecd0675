package badger

import (
	"context"

	"github.com/runstate/runstate/stores"
)

// A Badger store opens by the name "badger:PATH" (stores.Open);
// the setting nosync=true skips the fsync of every commit (docs/badger.md).
func init() {
	stores.Register(stores.Scheme{
		Name: "badger", Arg: "PATH", ArgMeans: "a directory", Example: "badger:.runstate/store",
		Settings: []string{"nosync"},
		Open:     openNamed,
	})
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	noSync, err := opts.BoolSetting("nosync", false)
	if err != nil {
		return nil, err
	}
	s, err := Open(ctx, Options{Dir: name.Arg, NoSync: noSync, Logger: opts.Logger, Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	opts.Log().Info("using store", "store", "badger", "dir", name.Arg)
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}
