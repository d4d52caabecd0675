// Package plugin carries any runstate store across a process boundary,
// over gRPC with hashicorp/go-plugin, so that a store ships as a binary.
//
// A plugin author writes one line in main:
//
//	func main() { plugin.Serve(mystore.New()) }
//
// (or plugin.ServeOpener for a store made from the host's configuration),
// and a host opens the binary and gets the runstate interfaces back:
//
//	c, err := plugin.Open(ctx, "./runstate-plugin-badger", plugin.Options{Config: map[string]string{"dir": "/var/lib/runstate"}})
//	store := c.Store()
//	defer c.Close()
//
// Errors keep their identity across the boundary: errors.Is works on the
// host for every runstate sentinel, with the details (from/to, versions, field).
// A plugin process that dies turns every call into runstate.ErrUnavailable
// within a fraction of a second, and the plugin's log lines reach the host's
// slog logger.
//
// The protocol itself (the gRPC service, its messages, errors over the
// wire) is package protocol; this package adds the process: starting it,
// the handshake, starting it again after a crash, and Serve.
package plugin

import goplugin "github.com/hashicorp/go-plugin"

// ProtocolVersion is the plugin protocol this package speaks. A plugin
// built against another version is refused at start with a clear message.
const ProtocolVersion = 1

// Handshake keeps a host from running an arbitrary program as a plugin and
// a plugin from running without a host.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "RUNSTATE_PLUGIN",
	MagicCookieValue: "runstate-store-plugin",
}

// pluginName is the one plugin a runstate plugin binary serves.
const pluginName = "store"
