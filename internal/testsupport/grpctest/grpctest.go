// Package grpctest serves gRPC services in memory, for tests of what
// crosses a connection without the network.
package grpctest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Dial serves what register registers on an in-memory gRPC server made
// with opts, and returns a connection to it; both end with tb.
func Dial(tb testing.TB, register func(grpc.ServiceRegistrar), opts ...grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	register(srv)
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}
