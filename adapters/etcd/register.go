package etcd

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/stores"
)

// An etcd store opens by the name "etcd:ENDPOINTS[?prefix=P&max_txn_ops=N]"
// (stores.Open): the cluster's client addresses separated by commas, and
// optionally the key prefix (default DefaultPrefix) and the cluster's
// --max-txn-ops (default DefaultMaxTxnOps), which a plugin's
// configuration may give as the settings prefix and max_txn_ops instead.
// See docs/etcd.md.
func init() {
	stores.Register(stores.Scheme{
		Name: "etcd", Arg: "ENDPOINTS", ArgMeans: "the cluster's client addresses, separated by commas",
		Example:  "etcd:10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379",
		Settings: nameSettings,
		Check: func(name stores.Name) error {
			_, _, err := parseName(name.Arg)
			return err
		},
		Open: openNamed,
	})
}

// nameSettings are the settings a name's query may give too.
var nameSettings = []string{"prefix", "max_txn_ops"}

// parseName splits a name's argument into endpoints and the settings of
// its query.
func parseName(arg string) ([]string, map[string]string, error) {
	list, query, _ := strings.Cut(arg, "?")
	var endpoints []string
	for _, e := range strings.Split(list, ",") {
		if strings.TrimSpace(e) == "" {
			return nil, nil, fmt.Errorf("an empty endpoint in %q; want host:port[,host:port…][?prefix=P]", list)
		}
		endpoints = append(endpoints, strings.TrimSpace(e))
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return nil, nil, fmt.Errorf("the query %q does not parse: %v", query, err)
	}
	settings := map[string]string{}
	for k, v := range values {
		if !slices.Contains(nameSettings, k) || len(v) != 1 {
			return nil, nil, fmt.Errorf("the query sets %q; it takes prefix and max_txn_ops, once each", k)
		}
		settings[k] = v[0]
	}
	return endpoints, settings, nil
}

func openNamed(ctx context.Context, name stores.Name, opts stores.Options) (*stores.Opened, error) {
	endpoints, settings, err := parseName(name.Arg)
	if err != nil {
		return nil, runstate.InvalidArgument("store", "%v", err)
	}
	for k, v := range opts.Settings { // a plugin's configuration
		settings[k] = v
	}
	opts.Settings = settings
	maxOps, err := opts.PositiveSetting("max_txn_ops", DefaultMaxTxnOps)
	if err != nil {
		return nil, err
	}
	s, err := Open(ctx, Options{Endpoints: endpoints, Prefix: settings["prefix"], MaxTxnOps: maxOps, Clock: opts.Clock, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	opts.Log().Info("using store", "store", "etcd", "endpoints", strings.Join(endpoints, ","), "prefix", s.data.k.prefix())
	return &stores.Opened{Runs: s, Close: s.Close}, nil
}
