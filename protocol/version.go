package protocol

import "fmt"

// The protocol's version, MAJOR.MINOR (docs/protocol.md, "Versions").
// Major is the version go-plugin's handshake checks (plugin.ProtocolVersion)
// and the service's package (runstate.plugin.v1): a new major is a new
// protocol, which a peer of another major refuses at once. Minor grows
// with every addition a minor version may make: a call, a feature a server
// announces, a field whose meaning a server keeps. docs/protocol.md,
// "History", lists what each minor added.
const (
	Major = 1
	Minor = 8
)

// Version is this package's protocol version, MAJOR.MINOR.
var Version = fmt.Sprintf("%d.%d", Major, Minor)

// A server older than version numbers in Open names none, nor features.
// One of 1.6 is known by the call 1.6 added, SetClock, which it answers
// (whatever the answer) where an older one answers UNIMPLEMENTED: it keeps
// the fields with meaning of 1.1 to 1.3 (keptSince16). One older than that
// is taken to keep none.
const (
	recognisedVersion = "1.6"
	olderThanNames    = "1.5 or older"
)

// Speaks is the protocol version the server speaks as messages and
// reports show it: ProtocolVersion, or "1.5 or older" from a server that
// predates version numbers in Open and is not recognised as 1.6.
func (i StoreInfo) Speaks() string {
	if i.ProtocolVersion == "" {
		return olderThanNames
	}
	return i.ProtocolVersion
}
