package badger

import (
	"context"

	"github.com/runstate/runstate"
)

// A Badger store opens by the name "badger:PATH" (runstate.OpenStore);
// the setting nosync=true skips the fsync of every commit (docs/badger.md).
func init() {
	runstate.RegisterScheme(runstate.StoreScheme{
		Name: "badger", Arg: "PATH", ArgMeans: "a directory", Example: "badger:.runstate/store",
		Settings: []string{"nosync"},
		Open:     openNamed,
	})
}

func openNamed(ctx context.Context, name runstate.StoreName, opts runstate.OpenOptions) (*runstate.OpenedStore, error) {
	noSync, err := opts.BoolSetting("nosync", false)
	if err != nil {
		return nil, err
	}
	s, err := Open(ctx, Options{Dir: name.Arg, NoSync: noSync, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	opts.Log().Info("using store", "store", "badger", "dir", name.Arg)
	return &runstate.OpenedStore{Runs: s, Close: s.Close}, nil
}
