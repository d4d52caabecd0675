// Command runstate-plugin-mysql serves a MySQL store as a plugin.
// Configuration: dsn (required, secret), max_open_conns, and
// scratch_database=true: the plugin creates the DSN's database, which must
// not exist, and drops it when it stops (for a database per conformance
// check: dsn=…/runs_{{unique}}); or create_database=true: it creates the
// database when missing and keeps it, so that a plugin killed and started
// again opens its predecessor's data (conformance-runner --kill-plugin).
// The settings are those of the store name mysql:DSN (stores.Open).
package main

import (
	_ "github.com/runstate/runstate/adapters/mysql" // the mysql scheme
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(plugin.SchemeOpener("mysql", "dsn"), plugin.WithName("mysql", "mysql/innodb"))
}
