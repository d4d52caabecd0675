package protocol

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// WatchRunnable implements the protocol's WatchRunnable for a store that
// is a runstate.RunnableWatcher: a first notice once the store watches,
// then one for each value of its channel, until the caller goes or the
// store's channel closes (then UNAVAILABLE: the client watches again).
func (s *Service) WatchRunnable(_ *pb.WatchRunnableRequest, stream grpc.ServerStreamingServer[pb.RunnableNotice]) error {
	w, err := s.runnableWatcher()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	wake, err := w.WatchRunnable(ctx, runstate.WatchRunnableParams{})
	if err != nil {
		return toStatus(err)
	}
	if err := stream.Send(&pb.RunnableNotice{}); err != nil {
		return err
	}
	for range wake {
		if err := stream.Send(&pb.RunnableNotice{}); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return toStatus(ctx.Err())
	}
	return toStatus(runstate.Unavailable("the store stopped watching for runnable runs (closed?)", nil))
}

// runnableWatcher returns what announces the open store's runnable runs;
// a store without it is answered UNIMPLEMENTED, as an older server would.
func (s *Service) runnableWatcher() (runstate.RunnableWatcher, error) {
	if _, _, err := s.get(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.watcher == nil {
		return nil, status.Error(codes.Unimplemented, "the store does not announce runnable runs (runstate.RunnableWatcher): poll")
	}
	return s.watcher, nil
}

var _ runstate.RunnableWatcher = (*RemoteStore)(nil)

// WatchRunnable implements runstate.RunnableWatcher over the server's
// WatchRunnable stream, when the server offers it (Info().WatchRunnable);
// otherwise it fails with runstate.ErrInvalidArgument and the caller
// polls. It returns once the server watches. When the stream breaks (the
// server restarted, the connection dropped) the channel receives a value,
// since a notice may have been missed, and the store watches again, with
// pauses of 100 ms doubling up to 5 s, as long as ctx lasts; it closes
// when ctx ends, the store is closed, or the server no longer offers it.
func (r *RemoteStore) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	if !r.info.WatchRunnable {
		return nil, runstate.InvalidArgument("watch", "%s does not announce runnable runs (its store is no runstate.RunnableWatcher, or the server predates them): poll", r.peer)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopWithStore := context.AfterFunc(r.done, cancel)
	stream, end, err := r.watch(ctx)
	if err != nil {
		stopWithStore()
		cancel()
		return nil, err
	}
	wake := make(chan struct{}, 1)
	go func() {
		defer stopWithStore()
		defer cancel()
		r.relay(ctx, stream, end, wake)
	}()
	return wake, nil
}

// watch opens the stream on the route r picks and waits for its first
// notice, which says that the server watches; end ends the stream.
func (r *RemoteStore) watch(ctx context.Context) (stream grpc.ServerStreamingClient[pb.RunnableNotice], end func(), err error) {
	route, err := r.route()
	if err != nil {
		return nil, nil, err
	}
	streamCtx, cancel := context.WithCancel(ctx)
	stop := func() bool { return true }
	if route.Life != nil {
		stop = context.AfterFunc(route.Life, cancel)
	}
	end = func() { stop(); cancel() }
	if stream, err = route.Client.WatchRunnable(streamCtx, &pb.WatchRunnableRequest{}); err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		end()
		return nil, nil, callError(ctx, r.peer, route, err)
	}
	return stream, end, nil
}

// relay passes the stream's notices on to wake until ctx ends, watching
// again when the stream breaks, as WatchRunnable says.
func (r *RemoteStore) relay(ctx context.Context, stream grpc.ServerStreamingClient[pb.RunnableNotice], end func(), wake chan<- struct{}) {
	defer close(wake)
	send := func() {
		select {
		case wake <- struct{}{}:
		default: // one is waiting already: they coalesce
		}
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			send()
			continue
		}
		end()
		if ctx.Err() != nil {
			return
		}
		send() // notices sent while the stream was down are lost
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			if stream, end, err = r.watch(ctx); err == nil {
				send()
				break
			}
			if !retryable(err) {
				return
			}
		}
	}
}

// retryable reports whether watching may succeed later: the server or
// its store is away, not gone for good or refusing the watch.
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	return runstate.CodeOf(err) == runstate.CodeUnavailable || status.Code(err) == codes.Unavailable
}
