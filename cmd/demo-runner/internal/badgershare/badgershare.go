// Package badgershare lets every process of one machine use a Badger
// store, which only one process may open at a time. The process that
// holds the directory serves the store on a unix socket that belongs to the
// directory; the others use the store through that socket, with the same
// protocol as store plugins, and take the directory over when its holder
// exits. Calls go to whichever process holds the directory, so the store
// behaves as one store whatever the number of processes.
package badgershare

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/oklog/ulid/v2"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/internal/privatedir"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/protocol"
)

// Options configure Open.
type Options struct {
	// Dir is the Badger directory.
	Dir string
	// Serve: while this process holds the directory, it serves the store to
	// the machine's other processes. Long-running processes serve; a
	// short command prefers the socket of a process that serves, and holds
	// the directory only when nobody does, for as short as it runs.
	Serve bool
	// Wait bounds how long Open waits for a directory held by a process
	// that does not serve it (a short command) to come free; default 10s.
	Wait   time.Duration
	Logger *slog.Logger
}

// Store is a runstate.Store on a Badger directory shared by the machine's
// processes. Safe for concurrent use.
type Store struct {
	opts Options
	sock string

	mu       sync.Mutex
	current  *backend      // nil after the serving process went away, until the next call
	reaching chan struct{} // closed when the call reaching the store afresh is done
	closed   bool
}

var _ runstate.Store = (*Store)(nil)

// Features implements runstate.RunStateStore: leases and lease reading,
// one call at a time (a batch call through the socket would have to be
// tried again whole when its server is gone).
func (s *Store) Features() runstate.Features { return runstate.FeaturesOf(s) }

// backend is how this process reaches the store right now.
type backend struct {
	store runstate.Store
	// local: this process holds the directory; server, when it serves it.
	local  *badger.Store
	server *grpc.Server
	// remote: another process serves it.
	conn   *grpc.ClientConn
	client *protocol.RemoteStore
}

// SocketPath is where the holder of dir serves it: next to the directory
// (dir + ".sock"), or, when that path is too long for a unix socket, in a
// private directory of the user's (see privatedir.UnderTemp). dir is
// resolved first, so that every path to one directory finds one socket.
func SocketPath(dir string) (string, error) {
	abs, err := Resolve(dir)
	if err != nil {
		return "", err
	}
	// The socket is bound in a directory made beside it (serve) before it
	// is moved into place: that path, the longer, must fit too.
	if p := abs + ".sock"; len(filepath.Dir(p))+len(stagingSuffix) < maxSocketPath {
		return p, nil
	}
	private, err := privatedir.UnderTemp("sockets")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(private, hex.EncodeToString(sum[:12])+".sock"), nil
}

// Resolve names dir the same way from any working directory and through
// any symbolic link: absolute, links followed. A directory not made yet
// resolves as it will once made (its parent's links followed).
func Resolve(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	}
	if parent, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(parent, filepath.Base(abs)), nil
	}
	return abs, nil
}

// maxSocketPath is below the shortest limit of a unix socket path (104 on
// BSDs, 108 on Linux, counting the terminating NUL).
const maxSocketPath = 100

// stagingSuffix is as long as the longest path serve binds the socket at
// within the socket's directory: os.MkdirTemp's pattern, whose random part
// is at most 10 digits, then the socket's name.
const (
	stagingPattern = ".runstate-sock-"
	stagingSuffix  = "/" + stagingPattern + "0123456789" + "/s"
)

// Open returns the store in opts.Dir: the directory itself when no other
// process holds it, otherwise the store its holder serves.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Wait == 0 {
		opts.Wait = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sock, err := SocketPath(opts.Dir)
	if err != nil {
		return nil, runstate.Unavailable("cannot place the store's socket", err)
	}
	s := &Store{opts: opts, sock: sock}
	b, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	s.current = b
	return s, nil
}

// Held reports whether this process holds the directory (at the moment).
func (s *Store) Held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current != nil && s.current.local != nil
}

// Socket is the path of the directory's socket.
func (s *Store) Socket() string { return s.sock }

// acquire reaches the store: through the socket of the process that
// serves it, or by opening the directory. A short command tries the socket
// first, so as not to hold the directory while a serving process would.
func (s *Store) acquire(ctx context.Context) (*backend, error) {
	deadline := time.Now().Add(s.opts.Wait)
	for attempt := 0; ; attempt++ {
		if !s.opts.Serve && attempt == 0 { // later attempts dial after the open below
			if b, err := s.dial(ctx); err == nil {
				return b, nil
			}
		}
		st, err := badger.Open(ctx, badger.Options{Dir: s.opts.Dir, Logger: s.opts.Logger})
		if err == nil {
			b := &backend{store: st, local: st}
			if s.opts.Serve {
				if err := s.serve(b); err != nil {
					s.opts.Logger.Warn("cannot share the store with other processes", "socket", s.sock, "error", err)
				}
			}
			return b, nil
		}
		if !errors.Is(err, badger.ErrDirectoryInUse) {
			return nil, err
		}
		if b, derr := s.dial(ctx); derr == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, runstate.Unavailable(fmt.Sprintf("the badger directory %s is held by another process that does not share it "+
				"(nothing answered on %s for %v); if it is a demo-runner command, it ends soon: try again", s.opts.Dir, s.sock, s.opts.Wait), err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dial connects to the process that serves the directory.
func (s *Store) dial(ctx context.Context) (*backend, error) {
	if _, err := os.Stat(s.sock); err != nil {
		return nil, err
	}
	// Only a server of this user (or root) is trusted with the store: a
	// socket of someone else's would hand this process runs to execute.
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", addr)
		if err == nil && !peerIsSameUser(c) {
			c.Close()
			return nil, fmt.Errorf("the process serving %s belongs to another user", addr)
		}
		return c, err
	}
	conn, err := grpc.NewClient("passthrough:///"+s.sock, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer),
		tracing.DialOption())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := protocol.Connect(ctx, protocol.ConnectParams{Conn: conn, Peer: "the store served at " + s.sock})
	if err != nil {
		conn.Close()
		return nil, err
	}
	st, ok := runstate.As[runstate.Store](c.Checked())
	if !ok {
		c.Close()
		conn.Close()
		return nil, runstate.Unavailable("the process serving "+s.sock+" offers no leases", nil)
	}
	return &backend{store: st, conn: conn, client: c}, nil
}

// serve shares the store this process holds on the socket. The socket is
// made in a private directory, restricted to this user, and only then moved
// into place, so that nobody else can connect in between.
func (s *Store) serve(b *backend) error {
	// This process holds the directory, so a socket left at the path
	// belongs to a holder that is gone.
	if err := os.Remove(s.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	private, err := os.MkdirTemp(filepath.Dir(s.sock), stagingPattern)
	if err != nil {
		return err
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return err
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		lis.Close()
		return err
	}
	if err := os.Rename(tmp, s.sock); err != nil {
		lis.Close()
		return err
	}
	b.server = grpc.NewServer(tracing.ServerOption())
	protocol.NewService(protocol.ServiceOptions{Name: "badger", Version: "shared by pid " + fmt.Sprint(os.Getpid()), Store: b.local}).Register(b.server)
	go b.server.Serve(sameUser{lis})
	s.opts.Logger.Debug("sharing the store with other processes", "socket", s.sock)
	return nil
}

var _ runstate.RunWatcher = (*Store)(nil)

// WatchRun implements runstate.RunWatcher on the current backend: the
// directory's own notices when this process holds it (every process's
// writes pass through the holder), else those of the process that serves
// it. The watch ends when that backend goes (its serving process
// exited); a follower then polls (runstate.Follow).
func (s *Store) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	b, err := s.backendFor(ctx)
	if err != nil {
		return nil, err
	}
	if b.local != nil {
		return b.local.WatchRun(ctx, p)
	}
	return b.client.WatchRun(ctx, p)
}

var _ runstate.RunnableWatcher = (*Store)(nil)

// WatchRunnable implements runstate.RunnableWatcher on the current
// backend, as WatchRun does: the holder's notices see every process's
// writes, so a signal sent by a short command wakes the holder's worker.
func (s *Store) WatchRunnable(ctx context.Context, p runstate.WatchRunnableParams) (<-chan struct{}, error) {
	b, err := s.backendFor(ctx)
	if err != nil {
		return nil, err
	}
	if b.local != nil {
		return b.local.WatchRunnable(ctx, p)
	}
	return b.client.WatchRunnable(ctx, p)
}

// close lets go of the store: a server stops (after the calls in flight,
// at most a few seconds), the socket goes, the directory is closed.
func (b *backend) close(sock string) error {
	if b.local == nil {
		b.client.Close()
		return b.conn.Close()
	}
	if b.server != nil {
		done := make(chan struct{})
		go func() { b.server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			b.server.Stop()
		}
		os.Remove(sock)
	}
	return b.local.Close()
}

// Close lets go of the store; another process may take the directory over.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.current == nil {
		return nil
	}
	b := s.current
	s.current = nil
	return b.close(s.sock)
}

// backendFor returns the backend to call, reaching the store afresh when
// the process that served it went away. One call reaches it; the others
// wait for that, each as long as its own context allows.
func (s *Store) backendFor(ctx context.Context) (*backend, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, runstate.Unavailable("the store is closed", nil)
		case s.current != nil:
			b := s.current
			s.mu.Unlock()
			return b, nil
		case s.reaching != nil:
			wait := s.reaching
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		s.reaching = done
		s.mu.Unlock()
		// Not bound to this caller's context: the others wait for it too.
		b, err := s.acquire(context.WithoutCancel(ctx))
		s.mu.Lock()
		s.reaching = nil
		if err == nil {
			if s.closed {
				b.close(s.sock)
				err = runstate.Unavailable("the store is closed", nil)
			} else {
				s.current = b
				where := "through " + s.sock
				if b.local != nil {
					where = "holding the directory"
				}
				s.opts.Logger.Info("reached the store again after its serving process went away", "dir", s.opts.Dir, "now", where)
			}
		}
		s.mu.Unlock()
		close(done)
		return b, err
	}
}

// lost drops a remote backend whose call failed as unavailable: the
// process serving the store may have exited. It reports whether it did.
func (s *Store) lost(b *backend, err error) bool {
	if b.local != nil || !errors.Is(err, runstate.ErrUnavailable) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == b {
		s.current = nil
		b.close(s.sock)
	}
	return true
}

// call runs f on the current backend. When the serving process went away,
// the next call reaches the store afresh; a call that cannot have had an
// effect twice (a read, a renewal, a compare-and-set) is tried once more
// at once.
func call[T any](s *Store, ctx context.Context, again bool, f func(runstate.Store) (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		b, err := s.backendFor(ctx)
		if err != nil {
			var zero T
			return zero, err
		}
		out, err := f(b.store)
		if err == nil || !s.lost(b, err) || !again || attempt > 0 {
			return out, err
		}
	}
}

// CreateRun implements runstate.RunStateStore. A run id the caller leaves
// empty is chosen here, so that a create whose answer was lost with its
// server can be tried again: a fresh ULID that exists already can only be
// this very create.
func (s *Store) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	generated := p.RunID == ""
	if generated {
		p.RunID = ulid.Make().String()
	}
	run, err := call(s, ctx, generated, func(st runstate.Store) (runstate.RunSnapshot, error) { return st.CreateRun(ctx, p) })
	if generated && errors.Is(err, runstate.ErrAlreadyExists) {
		return s.GetRun(ctx, p.RunID)
	}
	return run, err
}

// UpdateRun implements runstate.RunStateStore.
func (s *Store) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.RunSnapshot, error) { return st.UpdateRun(ctx, p) })
}

// GetRun implements runstate.RunStateStore.
func (s *Store) GetRun(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.RunSnapshot, error) { return st.GetRun(ctx, runID) })
}

// ListRuns implements runstate.RunStateStore.
func (s *Store) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.RunPage, error) { return st.ListRuns(ctx, p) })
}

// ListAuditEvents implements runstate.RunStateStore.
func (s *Store) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.AuditPage, error) { return st.ListAuditEvents(ctx, p) })
}

// ClaimRun implements runstate.LeaseStore. Not tried again: a claim whose
// answer was lost holds the run until its lease expires.
func (s *Store) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	return call(s, ctx, false, func(st runstate.Store) (runstate.Claim, error) { return st.ClaimRun(ctx, p) })
}

// ClaimNextRun implements runstate.LeaseStore.
func (s *Store) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	return call(s, ctx, false, func(st runstate.Store) (runstate.Claim, error) { return st.ClaimNextRun(ctx, p) })
}

// RenewLease implements runstate.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.Lease, error) { return st.RenewLease(ctx, p) })
}

// ReleaseLease implements runstate.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	_, err := call(s, ctx, false, func(st runstate.Store) (struct{}, error) { return struct{}{}, st.ReleaseLease(ctx, p) })
	return err
}

// ListRunnableRuns implements runstate.LeaseStore.
func (s *Store) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.RunPage, error) { return st.ListRunnableRuns(ctx, p) })
}

// GetLease implements runstate.LeaseReader: Badger tells leases, and so
// does the socket's protocol. (A failure here is not ErrUnavailable, which
// would drop the connection to the serving process.)
func (s *Store) GetLease(ctx context.Context, runID string) (runstate.Lease, error) {
	return call(s, ctx, true, func(st runstate.Store) (runstate.Lease, error) {
		lr, ok := runstate.As[runstate.LeaseReader](st)
		if !ok {
			return runstate.Lease{}, errors.New("badgershare: the store behind the socket does not tell leases")
		}
		return lr.GetLease(ctx, runID)
	})
}
