// Command floorserver is the plugin benchmarks' floor: a plain grpc-go
// server in its own process, with the plugin server's transport settings
// but none of runstate's protocol (no go-plugin handshake, no message
// conversions, no validation on the host). Its Update and Get call the
// same store the plugin would, so the plugin's own cost is the difference
// between the two. It prints "ready" once it serves on the unix socket
// named by -socket.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"runtime"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/memory"
)

// windowSize is the plugin's fixed flow-control window (plugin/server.go).
const windowSize = 4 << 20

func main() {
	socket := flag.String("socket", "", "unix socket to serve on")
	store := flag.String("store", "memory", "memory or badger")
	dir := flag.String("dir", "", "Badger directory")
	flag.Parse()
	ctx := context.Background()
	var s runstate.RunStateStore
	var err error
	switch *store {
	case "memory":
		s, err = memory.Open(ctx, memory.Options{})
	case "badger":
		s, err = badger.Open(ctx, badger.Options{Dir: *dir})
	default:
		err = fmt.Errorf("unknown store %q", *store)
	}
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.NumStreamWorkers(uint32(max(runtime.GOMAXPROCS(0), 2))),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize))
	srv.RegisterService(&serviceDesc, &floor{store: s, runs: map[string]runstate.RunSnapshot{}})
	fmt.Println("ready")
	log.Fatal(srv.Serve(lis))
}

type floor struct {
	store runstate.RunStateStore
	mu    sync.Mutex
	runs  map[string]runstate.RunSnapshot // the last version each caller saw
}

func (f *floor) noop(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (f *floor) create(ctx context.Context, _ *emptypb.Empty) (*wrapperspb.StringValue, error) {
	r, err := f.store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench",
		Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}}})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.runs[r.RunID] = r
	f.mu.Unlock()
	return wrapperspb.String(r.RunID), nil
}

func (f *floor) get(ctx context.Context, id *wrapperspb.StringValue) (*wrapperspb.Int64Value, error) {
	r, err := f.store.GetRun(ctx, id.Value)
	return wrapperspb.Int64(r.Version), err
}

// update flips the run between running and waiting, as the plugin
// benchmark's UpdateRun does; one caller per run.
func (f *floor) update(ctx context.Context, id *wrapperspb.StringValue) (*wrapperspb.Int64Value, error) {
	f.mu.Lock()
	run := f.runs[id.Value]
	f.mu.Unlock()
	to := runstate.StatusRunning
	if run.Status == runstate.StatusRunning {
		to = runstate.StatusWaiting
	}
	run, err := f.store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: id.Value, ExpectedVersion: run.Version, Status: string(to)})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.runs[id.Value] = run
	f.mu.Unlock()
	return wrapperspb.Int64(run.Version), nil
}

// Service names the client uses: /runstate.floor.Floor/<Method>.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "runstate.floor.Floor",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Noop", Handler: unary((*floor).noop)},
		{MethodName: "Create", Handler: unary((*floor).create)},
		{MethodName: "Get", Handler: unary((*floor).get)},
		{MethodName: "Update", Handler: unary((*floor).update)},
	},
}

// unary adapts a method of floor to grpc's handler: decode the request,
// call.
func unary[Req any, PReq interface {
	*Req
	proto.Message
}, Resp any](call func(*floor, context.Context, PReq) (Resp, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := PReq(new(Req))
		if err := dec(in); err != nil {
			return nil, err
		}
		return call(srv.(*floor), ctx, in)
	}
}
