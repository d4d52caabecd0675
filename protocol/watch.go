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
	return serveWatch(stream, "runnable runs", runstate.WatchRunnableOf(w), &pb.RunnableNotice{})
}

// WatchRun implements the protocol's WatchRun for a store that is a
// runstate.RunWatcher, as WatchRunnable does.
func (s *Service) WatchRun(r *pb.WatchRunRequest, stream grpc.ServerStreamingServer[pb.RunNotice]) error {
	w, err := s.runWatcher()
	if err != nil {
		return err
	}
	return serveWatch(stream, "run "+r.RunId, runstate.WatchRunOf(w, runstate.WatchRunParams{RunID: r.RunId}), &pb.RunNotice{})
}

// serveWatch is the body of both watches: notice once watch stands, then
// at each of its values.
func serveWatch[T any](stream grpc.ServerStreamingServer[T], what string, watch func(context.Context) (<-chan struct{}, error), notice *T) error {
	ctx := stream.Context()
	wake, err := watch(ctx)
	if err != nil {
		return toStatus(err)
	}
	if err := stream.Send(notice); err != nil {
		return err
	}
	for range wake {
		if err := stream.Send(notice); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return toStatus(ctx.Err())
	}
	return toStatus(runstate.Unavailable("the store stopped watching "+what+" (closed?)", nil))
}

// runnableWatcher returns what announces the open store's runnable runs;
// a store without it is answered UNIMPLEMENTED, as an older server would.
func (s *Service) runnableWatcher() (runstate.RunnableWatcher, error) {
	if s.watcher != nil {
		return s.watcher, nil
	}
	return featureOf[runstate.RunnableWatcher](s, "runstate.RunnableWatcher: it does not announce runnable runs; poll")
}

// runWatcher returns what announces the writes of the open store's runs;
// a store without it is answered UNIMPLEMENTED, as an older server would.
func (s *Service) runWatcher() (runstate.RunWatcher, error) {
	if s.runWatch != nil {
		return s.runWatch, nil
	}
	return featureOf[runstate.RunWatcher](s, "runstate.RunWatcher: it does not announce the writes of a run; poll")
}

var (
	_ runstate.RunnableWatcher = (*RemoteStore)(nil)
	_ runstate.RunWatcher      = (*RemoteStore)(nil)
)

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
	return watchRemote(ctx, r, func(ctx context.Context, c pb.RunStateStoreClient) (grpc.ServerStreamingClient[pb.RunnableNotice], error) {
		return c.WatchRunnable(ctx, &pb.WatchRunnableRequest{})
	})
}

// WatchRun implements runstate.RunWatcher over the server's WatchRun
// stream, when the server offers it (Info().WatchRun), as WatchRunnable
// does.
func (r *RemoteStore) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	if !r.info.WatchRun {
		return nil, runstate.InvalidArgument("watch", "%s does not announce the writes of a run (its store is no runstate.RunWatcher, or the server predates them): poll", r.peer)
	}
	return watchRemote(ctx, r, func(ctx context.Context, c pb.RunStateStoreClient) (grpc.ServerStreamingClient[pb.RunNotice], error) {
		return c.WatchRun(ctx, &pb.WatchRunRequest{RunId: p.RunID})
	})
}

// openStream opens one watch stream on a connection.
type openStream[T any] func(ctx context.Context, c pb.RunStateStoreClient) (grpc.ServerStreamingClient[T], error)

// watchRemote is the body of both remote watches: it opens the stream and
// relays it, as WatchRunnable says.
func watchRemote[T any](ctx context.Context, r *RemoteStore, open openStream[T]) (<-chan struct{}, error) {
	ctx, cancel := context.WithCancel(ctx)
	stopWithStore := context.AfterFunc(r.done, cancel)
	stream, end, err := watchStream(ctx, r, open)
	if err != nil {
		stopWithStore()
		cancel()
		return nil, err
	}
	wake := make(chan struct{}, 1)
	go func() {
		defer stopWithStore()
		defer cancel()
		relayStream(ctx, r, open, stream, end, wake)
	}()
	return wake, nil
}

// watchStream opens the stream on the route r picks and waits for its
// first notice, which says that the server watches; end ends the stream.
func watchStream[T any](ctx context.Context, r *RemoteStore, open openStream[T]) (stream grpc.ServerStreamingClient[T], end func(), err error) {
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
	if stream, err = open(streamCtx, route.Client); err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		end()
		return nil, nil, callError(ctx, r.peer, route, err)
	}
	return stream, end, nil
}

// relayStream passes the stream's notices on to wake until ctx ends,
// watching again when the stream breaks, as WatchRunnable says.
func relayStream[T any](ctx context.Context, r *RemoteStore, open openStream[T], stream grpc.ServerStreamingClient[T], end func(), wake chan<- struct{}) {
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
			if stream, end, err = watchStream(ctx, r, open); err == nil {
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
