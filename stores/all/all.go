// Package all registers every kind of store runstate ships with
// stores.Register, so that stores.Open opens any of their
// names: memory, badger:PATH, mysql:DSN, postgres:DSN, etcd:ENDPOINTS,
// plugin:PATH and gateway:HOST:PORT. The commands import it for its side effect, as may any program that
// offers every kind.
package all

import (
	_ "github.com/runstate/runstate/adapters/badger"
	_ "github.com/runstate/runstate/adapters/etcd"
	_ "github.com/runstate/runstate/adapters/memory"
	_ "github.com/runstate/runstate/adapters/mysql"
	_ "github.com/runstate/runstate/adapters/postgres"
	_ "github.com/runstate/runstate/gateway"
	_ "github.com/runstate/runstate/plugin"
)
