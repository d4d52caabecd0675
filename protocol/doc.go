// Package protocol is runstate's wire protocol: every operation of
// runstate.RunStateStore and runstate.LeaseStore as one gRPC service
// (package runstate.plugin.v1, generated in protocol/pb), with errors that
// keep their identity across the wire (errors.Is works on the client for
// every contract sentinel, with its details). The batch interfaces
// (runstate.BatchCreator, BatchUpdater, BatchClaimer) cross too: a server
// says in Open which its store has, and the client's store (Checked) has
// exactly those, so that a server without them, an older one included,
// leaves its clients on single calls.
//
// Both sides are here, independent of how the connection is made:
//
//   - Service serves a store (one it opens from a client's configuration,
//     or one its owner shares) on any grpc.ServiceRegistrar;
//   - Connect returns a RemoteStore, the store served at the other end of
//     a grpc.ClientConnInterface; NewRemoteStore lets its caller pick each
//     call's connection (a plugin host whose plugin process is started
//     again).
//
// The plugin package carries the protocol to a child process (hashicorp/
// go-plugin); the gateway package carries it over TCP with TLS and tokens.
package protocol
