// Command runstate-plugin-postgres serves a PostgreSQL store as a plugin.
// Configuration: dsn (required, secret; the password may come from
// PGPASSWORD or ~/.pgpass instead), schema, max_open_conns, and
// scratch_schema=true: the plugin creates the schema, which must not
// exist, and drops it when it stops (for a schema per conformance check:
// schema=runs_{{unique}}); notify_runnable=true announces runnable runs to
// the workers that watch the schema directly (docs/postgres.md). The
// settings are those of the store name postgres:DSN (stores.Open).
package main

import (
	_ "github.com/runstate/runstate/adapters/postgres" // the postgres scheme
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(plugin.SchemeOpener("postgres", "dsn"), plugin.WithName("postgres", "postgres"))
}
