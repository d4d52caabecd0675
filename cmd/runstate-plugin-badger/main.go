// Command runstate-plugin-badger serves a Badger store as a plugin.
// Configuration: dir (required), nosync ("true" to skip fsync; see docs/badger.md).
package main

import (
	_ "github.com/runstate/runstate/adapters/badger" // the badger scheme
	"github.com/runstate/runstate/plugin"
)

func main() {
	plugin.ServeOpener(plugin.SchemeOpener("badger", "dir"), plugin.WithName("badger", "badger/v4"))
}
