// Package gateway serves a runstate store over the network, so that workers
// on many machines share it: the gRPC service of package protocol on TCP,
// with TLS, bearer tokens and roles. The gateway keeps no state of its own, so
// several gateways may stand in front of one shared store.
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/protocol/pb"
	"github.com/runstate/runstate/stores"
)

// DefaultMaxMessageBytes bounds a request or response (8 MiB: a run's
// snapshot stays a few MiB at most, see runstate.MaxHostStates).
const DefaultMaxMessageBytes = 8 << 20

// TestClockEnv, set in runstate-gateway's environment to an instant (RFC
// 3339), starts the gateway in test mode, for certification: its store's
// clock stands still there and moves only by an operator's SetClock
// (Client.SetClock). Never in production.
const TestClockEnv = "RUNSTATE_GATEWAY_TEST_CLOCK"

// CheckTestClock refuses test mode for the store a --store name names when
// that store does not read stores.Options.Clock: a plugin or another
// gateway behind the gateway keeps the clock of its own process, which
// the gateway cannot move.
func CheckTestClock(store string) error {
	if scheme := stores.Parse(store).Scheme; scheme == "plugin" || scheme == "gateway" {
		return fmt.Errorf("%s: a %s store keeps the clock of its own process, which the gateway cannot move", TestClockEnv, scheme)
	}
	return nil
}

// ServerOptions configure NewServer.
type ServerOptions struct {
	// Store is what the gateway serves. Required.
	Store runstate.RunStateStore
	// Tokens authenticates callers. Required; SetTokens replaces it.
	Tokens *Tokens
	// TLS secures the transport; nil serves plaintext, which the caller
	// must allow only on a loopback address (see LoopbackOnly).
	TLS *tls.Config
	// Logger receives one line per refused call and the server's messages;
	// defaults to slog.Default(). Tokens never appear in it.
	Logger *slog.Logger
	// MaxMessageBytes bounds a message; defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Watcher announces the store's runnable runs to watching workers; it
	// defaults to Store when that is a runstate.RunnableWatcher. Without
	// one, workers poll.
	Watcher runstate.RunnableWatcher
	// RunWatcher announces the writes of a run to its watchers (a
	// console's pages); it defaults to Store when that is a
	// runstate.RunWatcher. Without one, they poll.
	RunWatcher runstate.RunWatcher
	// Metrics, when set, receives the gateway's Prometheus series:
	// requests by method and code, latency, refusals and calls in flight.
	Metrics prometheus.Registerer
	// TestClock, for a gateway started in test mode (TestClockEnv), is the
	// clock Store reads, which an operator's SetClock moves; nil refuses
	// SetClock. For certification only.
	TestClock *protocol.TestClock
}

// Server is a gateway: a gRPC server of one store, and of gRPC's health
// service (SERVING while it serves).
type Server struct {
	grpc    *grpc.Server
	leases  runstate.LeaseReader // nil: the store cannot tell who holds a lease
	tokens  atomic.Pointer[Tokens]
	log     *slog.Logger
	metrics *metrics
	health  *health.Server
	// stopping ends when Stop begins: watches end with it, so that a
	// graceful stop does not wait for them.
	stopping context.Context
	stop     context.CancelFunc
}

// NewServer returns a gateway for opts.Store.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Store == nil {
		return nil, runstate.InvalidArgument("store", "the gateway needs a store to serve")
	}
	if opts.Tokens == nil {
		return nil, runstate.InvalidArgument("tokens", "the gateway needs tokens: nobody may use it without credentials")
	}
	s := &Server{log: opts.Logger, metrics: newMetrics(opts.Metrics), health: health.NewServer()}
	s.stopping, s.stop = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.Default()
	}
	s.tokens.Store(opts.Tokens)
	s.leases, _ = runstate.As[runstate.LeaseReader](opts.Store)
	if s.leases == nil {
		s.log.Warn("the store does not tell who holds a lease (runstate.LeaseReader): workers may claim, but not renew, release or write under a lease")
	}
	limit := opts.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	serverOpts := []grpc.ServerOption{
		grpc.InTapHandle(s.tap), grpc.ChainUnaryInterceptor(s.metrics.observe, s.authorize), grpc.StreamInterceptor(s.authorizeStream),
		grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit),
		grpc.MaxConcurrentStreams(maxStreamsPerConn), grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WaitForHandlers(true), // a stop returns after every handler, before the store closes
		tracing.ServerOption(),
	}
	if opts.TLS != nil {
		serverOpts = append(serverOpts, grpc.Creds(loggedHandshakes{credentials.NewTLS(opts.TLS), s.log}))
	}
	s.grpc = grpc.NewServer(serverOpts...)
	protocol.NewService(protocol.ServiceOptions{Name: "gateway", Version: "1", Store: opts.Store, Watcher: opts.Watcher,
		RunWatcher: opts.RunWatcher, Clock: opts.TestClock}).Register(s.grpc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s, nil
}

// SetTokens replaces the credential table, for a reload (SIGHUP): calls
// that start afterwards are authenticated against t.
func (s *Server) SetTokens(t *Tokens) { s.tokens.Store(t) }

// Serve accepts connections on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// Stop stops accepting calls and waits for those in flight, at most until
// ctx ends; then it ends them.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown() // NOT_SERVING: balancers stop sending calls
	s.stop()            // watching workers watch again, elsewhere or later
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}

// Connection limits: a client that has not authenticated costs little.
const (
	maxStreamsPerConn = 256
	handshakeTimeout  = 10 * time.Second
	idleTimeout       = 5 * time.Minute
)

// tap authenticates a call from its headers alone, before its message is
// read, and refuses it without a valid token. It hands the principal to
// authorize, which checks the role and the lease rules with the request.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if isHealth(info.FullMethodName) {
		return ctx, nil
	}
	p, err := s.authenticate(info.Header.Get("authorization"))
	if err != nil {
		s.metrics.refused.WithLabelValues(string(runstate.CodeUnauthenticated)).Inc()
		s.log.Warn("gateway refused a call before reading it", "method", path.Base(info.FullMethodName),
			"remote", remote(ctx), "code", runstate.CodeUnauthenticated, "error", err)
		return ctx, protocol.Status(err)
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

// principalKey carries the principal tap authenticated to authorize.
type principalKey struct{}

// badToken explains a refused token to whoever holds it.
const badToken = "the gateway knows no principal with this bearer token (missing, mistyped, or removed from its tokens file): " +
	"check that the token's SHA-256 (runstate-gateway hash-token) is a token_sha256 of the gateway's tokens file"

func isHealth(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// authorizeStream admits the streaming methods: health Watch without a
// token, and WatchRunnable and WatchRun for a principal whose role may
// read; a watch
// ends when the gateway stops.
func (s *Server) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if isHealth(info.FullMethod) {
		return handler(srv, ss)
	}
	method := path.Base(info.FullMethod)
	p, ok := ss.Context().Value(principalKey{}).(Principal)
	err := permit(p, method, nil)
	if !ok { // cannot happen: tap authenticated every call but health probes
		err = &runstate.Error{Code: runstate.CodeUnauthenticated, Message: badToken}
	}
	if err != nil {
		s.log.Warn("gateway refused a call", "method", method, "principal", p.Name, "remote", remote(ss.Context()), "code", runstate.CodeOf(err), "error", err)
		s.metrics.refused.WithLabelValues(string(runstate.CodeOf(err))).Inc()
		return protocol.Status(err)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	defer context.AfterFunc(s.stopping, cancel)()
	s.log.Debug("gateway watch", "method", method, "principal", p.Name)
	err = handler(srv, stoppableStream{ss, ctx})
	if s.stopping.Err() != nil {
		// Not the caller's cancellation: it may watch again, elsewhere or later.
		return protocol.Status(runstate.Unavailable("the gateway is stopping", nil))
	}
	return err
}

// stoppableStream is a server stream whose context also ends when the
// gateway stops.
type stoppableStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s stoppableStream) Context() context.Context { return s.ctx }

// remote is the caller's address, for logs.
func remote(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// need is the least role each method of the protocol requires.
var need = map[string]Role{
	"Open":             RoleReader,
	"GetLease":         RoleReader,
	"GetRun":           RoleReader,
	"ListRuns":         RoleReader,
	"ListAuditEvents":  RoleReader,
	"ListRunnableRuns": RoleReader,
	"WatchRunnable":    RoleReader, // a stream of empty notices
	"WatchRun":         RoleReader, // the same, for one run
	"CreateRun":        RoleWorker,
	"UpdateRun":        RoleWorker,
	"ClaimRun":         RoleWorker,
	"ClaimNextRun":     RoleWorker,
	"RenewLease":       RoleWorker,
	"ReleaseLease":     RoleWorker,
	// A batch needs the role of its single call.
	"CreateRuns": RoleWorker,
	"UpdateRuns": RoleWorker,
	"ClaimRuns":  RoleWorker,
	// The test clock of a gateway started for certification.
	"SetClock": RoleOperator,
}

// authorize authenticates every call, checks the principal's role and,
// for a worker, that it acts in its own name and under its own leases
// (which it asks the store), and records who wrote (see stampActor). A
// refused call changes nothing in the store.
func (s *Server) authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isHealth(info.FullMethod) {
		return handler(ctx, req) // a probe needs no token and learns nothing of the store
	}
	method := methodOf(info)
	p, ok := ctx.Value(principalKey{}).(Principal)
	err := permit(p, method, req)
	if !ok { // cannot happen: tap authenticated every call but health probes
		err = &runstate.Error{Code: runstate.CodeUnauthenticated, Message: badToken}
	}
	if err == nil && p.Role == RoleWorker {
		err = s.ownLease(ctx, p, req)
	}
	if err != nil {
		s.log.Warn("gateway refused a call", "method", method, "principal", p.Name, "remote", remote(ctx), "code", runstate.CodeOf(err), "error", err)
		s.metrics.refused.WithLabelValues(string(runstate.CodeOf(err))).Inc()
		return nil, protocol.Status(err)
	}
	stampActor(p, req)
	resp, err := handler(ctx, req)
	s.log.Debug("gateway call", "method", method, "principal", p.Name, "code", codeLabel(err))
	return resp, err
}

func methodOf(info *grpc.UnaryServerInfo) string { return path.Base(info.FullMethod) }

// authenticate reads the bearer token of a call's authorization header.
func (s *Server) authenticate(values []string) (Principal, error) {
	if len(values) != 1 {
		return Principal{}, &runstate.Error{Code: runstate.CodeUnauthenticated, Message: "the call carries no bearer token (one authorization header)"}
	}
	token, ok := strings.CutPrefix(values[0], "Bearer ")
	if !ok {
		return Principal{}, &runstate.Error{Code: runstate.CodeUnauthenticated, Message: "the authorization header is not a bearer token"}
	}
	p, ok := s.tokens.Load().Authenticate(token)
	if !ok {
		return Principal{}, &runstate.Error{Code: runstate.CodeUnauthenticated, Message: badToken}
	}
	return p, nil
}

// permit checks that p may make this call with this request.
func permit(p Principal, method string, req any) error {
	least, known := need[method]
	if !known {
		return denied(p, "%s is not an operation of the gateway", method)
	}
	if !p.Role.Allows(least) {
		return denied(p, "%s needs the %s role", method, least)
	}
	if p.Role != RoleWorker {
		return nil
	}
	// A worker acts in its own name: its leases are its own (the owner's
	// worker is its principal name), and it writes runs only under a lease.
	switch r := req.(type) {
	case *pb.ClaimRunRequest:
		return ownName(p, r.GetOwner())
	case *pb.ClaimNextRunRequest:
		return ownName(p, r.GetOwner())
	case *pb.ClaimRunsRequest:
		return ownName(p, r.GetOwner())
	case *pb.UpdateRunRequest:
		return underLease(p, r)
	case *pb.UpdateRunsRequest:
		// One update a worker may not make refuses the whole batch, naming
		// it, so that a refused call changes nothing, as for single calls.
		for i, u := range r.GetUpdates() {
			if err := underLease(p, u); err != nil {
				return &runstate.BatchItemError{Index: i, Err: err}
			}
		}
	}
	return nil
}

// underLease refuses a worker's write without a lease token.
func underLease(p Principal, r *pb.UpdateRunRequest) error {
	if r.GetLeaseToken() == 0 {
		return denied(p, "a worker writes a run only under its lease (a lease token); writes without one need the operator role")
	}
	return nil
}

// ownLease checks that a worker renews, releases or writes only under a
// lease the store issued to it. Tokens grow by one with every claim of a
// run, and the holder of an issued token never changes: the current token
// is checked for its holder, a token not yet issued is refused (it would
// be the next claimant's), and an earlier one passes on to the store,
// which refuses it (LEASE_LOST) as no longer current.
//
// A batch of updates is checked item by item, one lease read each; an item
// refused refuses the whole batch (a *runstate.BatchItemError naming it).
func (s *Server) ownLease(ctx context.Context, p Principal, req any) error {
	switch r := req.(type) {
	case *pb.RenewLeaseRequest:
		return s.ownsToken(ctx, p, r.GetRunId(), r.GetToken())
	case *pb.ReleaseLeaseRequest:
		return s.ownsToken(ctx, p, r.GetRunId(), r.GetToken())
	case *pb.UpdateRunRequest:
		return s.ownsToken(ctx, p, r.GetRunId(), r.GetLeaseToken())
	case *pb.UpdateRunsRequest:
		for i, u := range r.GetUpdates() {
			if err := s.ownsToken(ctx, p, u.GetRunId(), u.GetLeaseToken()); err != nil {
				return &runstate.BatchItemError{Index: i, Err: err}
			}
		}
	}
	return nil
}

// ownsToken checks that token of runID is p's, as ownLease explains.
func (s *Server) ownsToken(ctx context.Context, p Principal, runID string, token int64) error {
	if s.leases == nil {
		return denied(p, "the store cannot tell who holds a lease, so a worker cannot act under one through this gateway")
	}
	lease, err := s.leases.GetLease(ctx, runID)
	if err != nil {
		if runstate.CodeOf(err) == runstate.CodeNotFound || runstate.CodeOf(err) == runstate.CodeInvalidArgument {
			return nil // the store answers the call itself, with the same error
		}
		return err
	}
	switch {
	case token > lease.Token:
		// Not issued yet: it would belong to whoever claims the run next,
		// and the store would take it from the next claim on.
		return denied(p, "lease token %d of run %s has not been issued to it", token, runID)
	case token == lease.Token && lease.Owner.Worker != p.Name:
		return denied(p, "lease token %d of run %s is not one of its leases", token, runID)
	}
	return nil
}

func ownName(p Principal, o *pb.Owner) error {
	if o.GetWorker() != p.Name {
		return denied(p, "a worker claims in its own name: the owner's worker must be %q, not %q", p.Name, o.GetWorker())
	}
	return nil
}

func denied(p Principal, format string, args ...any) error {
	return &runstate.Error{Code: runstate.CodePermissionDenied, Message: fmt.Sprintf("principal %s (%s): ", p.Name, p.Role) + fmt.Sprintf(format, args...)}
}

// stampActor records who wrote: every write's actor carries the caller's
// principal name (AUD-010), whatever principal the call sent. A worker's
// writes are also recorded as its own, whatever actor the call named. An
// operator acts for others (crash recovery, a scheduler): the actor it
// names is kept as whom it acted on behalf of, beside its principal, and
// one it leaves without an id is recorded under its principal name.
// Every item of a batch is stamped as its single call would be, and a
// batch claim's actor (that of the starts it records) too.
func stampActor(p Principal, req any) {
	switch r := req.(type) {
	case *pb.CreateRunRequest:
		stamp(p, &r.Actor)
	case *pb.UpdateRunRequest:
		stamp(p, &r.Actor)
	case *pb.CreateRunsRequest:
		for _, run := range r.GetRuns() {
			stamp(p, &run.Actor)
		}
	case *pb.UpdateRunsRequest:
		for _, u := range r.GetUpdates() {
			stamp(p, &u.Actor)
		}
	case *pb.ClaimRunsRequest:
		stamp(p, &r.Actor)
	}
}

// stamp records p in the actor a points to, as stampActor says.
func stamp(p Principal, a **pb.Actor) {
	if *a == nil {
		*a = &pb.Actor{}
	}
	(*a).Principal = p.Name
	switch {
	case p.Role == RoleWorker:
		(*a).Kind, (*a).Id = string(runstate.ActorWorker), p.Name
	case (*a).Id == "":
		(*a).Id = p.Name
	}
}

// ServerTLS returns the TLS configuration of a gateway with the
// certificate and key in certFile and keyFile. With clientCAFile, clients
// must present a certificate that CA signed (mutual TLS).
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, runstate.InvalidArgument("tls", "cannot load the server certificate and key: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, runstate.InvalidArgument("tls", "cannot read CA file: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, runstate.InvalidArgument("tls", "%s holds no PEM certificate", file)
	}
	return pool, nil
}

// LoopbackOnly refuses an address that is not a loopback one: plaintext
// is for a gateway and its clients on one machine.
func LoopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return runstate.InvalidArgument("listen", "%q is not host:port: %v", addr, err)
	}
	// An IP literal only: a name could resolve elsewhere.
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return runstate.InvalidArgument("listen", "plaintext serves only a loopback IP address (127.0.0.1 or ::1), not %q; use TLS", host)
	}
	return nil
}

// loggedHandshakes logs every TLS handshake the gateway refuses (an unknown
// CA, an expired certificate, a client speaking plaintext), so that the
// operator sees why a client could not connect, as the client does.
type loggedHandshakes struct {
	credentials.TransportCredentials
	log *slog.Logger
}

func (l loggedHandshakes) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := l.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		l.log.Warn("gateway refused a connection: TLS handshake failed", "remote", conn.RemoteAddr().String(), "error", err)
	}
	return c, info, err
}

func (l loggedHandshakes) Clone() credentials.TransportCredentials {
	return loggedHandshakes{l.TransportCredentials.Clone(), l.log}
}
