package gateway

import (
	"context"

	"github.com/runstate/runstate/stores"
)

// A store behind a gateway opens by the name "gateway:HOST:PORT"
// (stores.Open), configured by stores.Options.Gateway. Its token
// comes from the token file or the environment, never from the name.
func init() {
	stores.Register(stores.Scheme{
		Name: "gateway", Arg: "HOST:PORT", ArgMeans: "the gateway's address", Example: "gateway:runs.example.com:7443",
		Open: openNamed,
	})
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	g := opts.Gateway
	dial := Options{TokenFile: g.TokenFile, Plaintext: g.Plaintext}
	if !g.Plaintext {
		cfg, err := ClientTLS(g.CAFile, g.CertFile, g.KeyFile)
		if err != nil {
			return nil, err
		}
		dial.TLS = cfg
	}
	c, err := Dial(ctx, name.Arg, dial)
	if err != nil {
		return nil, err
	}
	opts.Log().Info("using store", "store", "gateway", "addr", name.Arg, "tls", !g.Plaintext)
	return &stores.Opened{Runs: c.Store(), Close: c.Close, Watch: c.Watcher(), WatchRuns: c.RunWatcher()}, nil
}
