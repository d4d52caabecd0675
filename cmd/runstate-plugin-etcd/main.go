// Command runstate-plugin-etcd serves an etcd store as a plugin.
// Configuration: endpoints (required: the cluster's client addresses,
// separated by commas), prefix (every key's, default "runstate/"; for a
// prefix per conformance check: prefix=runstate-test/{{unique}}/) and
// max_txn_ops (the cluster's --max-txn-ops). The settings are those of
// the store name etcd:ENDPOINTS (stores.Open); see docs/etcd.md.
package main

import (
	_ "github.com/runstate/runstate/adapters/etcd" // the etcd scheme
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(plugin.SchemeOpener("etcd", "endpoints"), plugin.WithName("etcd", "etcd/client-v3"))
}
