package plugin

import "github.com/runstate/runstate/protocol"

// Status returns the gRPC status error that carries err across the wire
// with its identity; it forwards to protocol.Status, where new code looks.
func Status(err error) error { return protocol.Status(err) }

// FromStatus rebuilds the contract error a status of the protocol carries;
// peer names the other side in messages. It forwards to protocol.FromStatus.
func FromStatus(err error, peer string) error { return protocol.FromStatus(err, peer) }
