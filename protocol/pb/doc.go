// Package pb is the Go code protoc generates from runstate.proto, the
// runstate.plugin.v1 service beside it: the messages and the gRPC client
// and server of every store operation. Package protocol converts between
// these messages and the runstate types; use it rather than this package.
package pb
