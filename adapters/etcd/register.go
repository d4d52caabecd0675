package etcd

import (
	"context"
	"fmt"
	"strings"

	"github.com/runstate/runstate/stores"
)

// An etcd store opens by the name "etcd:ENDPOINTS" (stores.Open), the
// cluster's client addresses separated by commas, with the settings
// prefix (default DefaultPrefix) and max_txn_ops (the cluster's
// --max-txn-ops; default DefaultMaxTxnOps). See docs/etcd.md.
func init() {
	stores.Register(stores.Scheme{
		Name: "etcd", Arg: "ENDPOINTS", ArgMeans: "the cluster's client addresses, separated by commas",
		Example:  "etcd:10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379",
		Settings: []string{"prefix", "max_txn_ops"},
		Check: func(name stores.Name) error {
			for _, e := range strings.Split(name.Arg, ",") {
				if strings.TrimSpace(e) == "" {
					return fmt.Errorf("an empty endpoint in %q; want host:port[,host:port…]", name.Arg)
				}
			}
			return nil
		},
		Open: openNamed,
	})
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	maxOps, err := opts.PositiveSetting("max_txn_ops", DefaultMaxTxnOps)
	if err != nil {
		return nil, err
	}
	prefix := opts.Settings["prefix"]
	s, err := Open(ctx, Options{Endpoints: strings.Split(name.Arg, ","), Prefix: prefix, MaxTxnOps: maxOps})
	if err != nil {
		return nil, err
	}
	opts.Log().Info("using store", "store", "etcd", "endpoints", name.Arg, "prefix", s.data.k.prefix)
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}
