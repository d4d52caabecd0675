package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
	"github.com/runstate/runstate/internal/testsupport/testlog"
	"github.com/runstate/runstate/internal/testsupport/testtls"
	"github.com/runstate/runstate/protocol/pb"
)

// The principals of the tests, each with its token.
var principals = []struct {
	name  string
	role  gateway.Role
	token string
}{
	{"reader-r", gateway.RoleReader, "token-of-the-reader"},
	{"worker-a", gateway.RoleWorker, "token-of-worker-a"},
	{"worker-b", gateway.RoleWorker, "token-of-worker-b"},
	{"operator-o", gateway.RoleOperator, "token-of-the-operator"},
}

func tokensFile(skip string) []byte {
	var b strings.Builder
	b.WriteString("principals:\n")
	for _, p := range principals {
		if p.name != skip {
			fmt.Fprintf(&b, "  - name: %s\n    role: %s\n    token_sha256: %s\n", p.name, p.role, gateway.HashToken(p.token))
		}
	}
	return []byte(b.String())
}

func tokenOf(name string) string {
	for _, p := range principals {
		if p.name == name {
			return p.token
		}
	}
	panic(name)
}

// world is a gateway on loopback with mutual TLS in front of a memory store.
type world struct {
	logs    *testlog.Buffer
	addr    string
	server  *gateway.Server
	store   *memory.Store
	ca      *testtls.Authority
	client  tls.Certificate
	tokens  []byte
	clock   *conformance.ManualClock
	stopped bool
}

func newWorld(t testing.TB) *world { return newWorldWith(t, nil) }

func newWorldWith(t testing.TB, reg prometheus.Registerer) *world {
	t.Helper()
	w := &world{ca: testtls.NewAuthority(t, "runstate test CA"), tokens: tokensFile(""), logs: &testlog.Buffer{}}
	w.clock = conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	var err error
	if w.store, err = memory.Open(context.Background(), memory.Options{Clock: w.clock}); err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.ParseTokens(w.tokens)
	if err != nil {
		t.Fatal(err)
	}
	serverCert := w.ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour))
	w.client = w.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
	w.server, err = gateway.NewServer(gateway.ServerOptions{Store: w.store, Tokens: tokens, Logger: slog.New(slog.NewTextHandler(w.logs, nil)), Metrics: reg,
		TLS: &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: w.ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = lis.Addr().String()
	go w.server.Serve(lis)
	t.Cleanup(w.stop)
	return w
}

func (w *world) stop() {
	if !w.stopped {
		w.stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.server.Stop(ctx)
		w.store.Close()
	}
}

// tlsFor is the client side of the world's mutual TLS.
func (w *world) tlsFor() *tls.Config {
	return &tls.Config{RootCAs: w.ca.Pool, Certificates: []tls.Certificate{w.client}, MinVersion: tls.VersionTLS12}
}

// rawConn is a gRPC connection to the gateway over its TLS, that sends
// whatever a test writes: no token unless the call's context carries one.
func (w *world) rawConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(credentials.NewTLS(w.tlsFor())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (w *world) dial(t testing.TB, principal string) runstate.Store {
	t.Helper()
	return leased(w.dialClient(t, principal).Store())
}

// dialClient dials the gateway as principal.
func (w *world) dialClient(t testing.TB, principal string) *gateway.Client {
	t.Helper()
	c, err := gateway.Dial(context.Background(), w.addr, gateway.Options{Token: tokenOf(principal), TLS: w.tlsFor()})
	if err != nil {
		t.Fatalf("dial as %s: %v", principal, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The whole suite passes through the gateway, from a client over TCP and
// TLS, as an operator (who may do everything the checks do).
func TestConformanceThroughTheGateway(t *testing.T) {
	conformance.Run(t, conformance.Target{
		Name:         "memory through the gateway",
		Principal:    "operator-o", // the gateway names its caller in every event
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			w := newWorld(t)
			c := w.dialClient(t, "operator-o")
			return &harness{w: w, t: t, store: leased(c.Store()), watcher: c.RunWatcher()}, nil
		},
	})
}

type harness struct {
	w       *world
	t       *testing.T
	store   runstate.Store
	watcher runstate.RunWatcher
}

func (h *harness) Store() runstate.RunStateStore { return h.store }

// RunWatcher implements conformance.RunWatching.
func (h *harness) RunWatcher() runstate.RunWatcher { return h.watcher }
func (h *harness) OpenHandle(context.Context) (runstate.RunStateStore, error) {
	return h.w.dial(h.t, "operator-o"), nil
}
func (h *harness) Advance(d time.Duration) { h.w.clock.Advance(d) }
func (h *harness) Close(context.Context) error {
	h.w.stop()
	return nil
}

// Every refusal is typed on the client and changes nothing in the store.
func TestTheGatewayRefusesWhatAPrincipalMayNotDo(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	operator := w.dial(t, "operator-o")
	workerA, workerB, reader := w.dial(t, "worker-a"), w.dial(t, "worker-b"), w.dial(t, "reader-r")
	run, err := operator.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	claimA, err := workerA.ClaimRun(ctx, runstate.ClaimRunParams{RunID: "r1", Owner: runstate.Owner{Worker: "worker-a", Incarnation: "1"}, TTL: time.Minute})
	if err != nil {
		t.Fatalf("worker-a claims in its own name: %v", err)
	}
	// snapshot is everything a refused call could have changed: the run,
	// its trail and its lease.
	snapshot := func() (runstate.RunSnapshot, []runstate.AuditEvent, runstate.Lease) {
		r, err := w.store.GetRun(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		page, err := w.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := w.store.GetLease(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		return r, page.Events, lease
	}
	beforeRun, beforeEvents, beforeLease := snapshot()

	dialAs := func(o gateway.Options) func() error {
		return func() error {
			c, err := gateway.Dial(ctx, w.addr, o)
			if err == nil {
				_, err = c.Store().GetRun(ctx, "r1")
				c.Close()
			}
			return err
		}
	}
	otherCA := testtls.NewAuthority(t, "another CA")
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"no token", dialAs(gateway.Options{TLS: w.tlsFor(), TokenFile: "", Token: ""}), runstate.ErrUnauthenticated},
		{"a call without a token", func() error {
			conn := w.rawConn(t)
			_, err = pb.NewRunStateStoreClient(conn).GetRun(ctx, &pb.GetRunRequest{RunId: "r1"})
			if status.Code(err) != codes.Unauthenticated {
				return fmt.Errorf("status %v, want UNAUTHENTICATED", err)
			}
			return nil
		}, nil},
		{"a wrong token", dialAs(gateway.Options{TLS: w.tlsFor(), Token: "guess"}), runstate.ErrUnauthenticated},
		{"plaintext against TLS", dialAs(gateway.Options{Plaintext: true, Token: tokenOf("operator-o")}), runstate.ErrUnavailable},
		{"a server certificate of another CA", dialAs(gateway.Options{Token: tokenOf("operator-o"),
			TLS: &tls.Config{RootCAs: otherCA.Pool, Certificates: []tls.Certificate{w.client}}}), runstate.ErrUnavailable},
		{"a client certificate of another CA", dialAs(gateway.Options{Token: tokenOf("operator-o"),
			TLS: &tls.Config{RootCAs: w.ca.Pool, Certificates: []tls.Certificate{otherCA.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))}}}), runstate.ErrUnavailable},
		{"a server certificate for another name", func() error {
			// The gateway's certificate names 127.0.0.1; the client expects another name.
			c, err := gateway.Dial(ctx, w.addr, gateway.Options{Token: tokenOf("operator-o"),
				TLS: &tls.Config{RootCAs: w.ca.Pool, Certificates: []tls.Certificate{w.client}, ServerName: "gateway.invalid"}})
			if err == nil {
				c.Close()
			}
			return err
		}, runstate.ErrUnavailable},
		{"an expired client certificate", dialAs(gateway.Options{Token: tokenOf("operator-o"),
			TLS: &tls.Config{RootCAs: w.ca.Pool, Certificates: []tls.Certificate{w.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Hour))}}}), runstate.ErrUnavailable},
		{"a reader writing", func() error {
			_, err := reader.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: run.Version, Status: "canceled"})
			return err
		}, runstate.ErrPermissionDenied},
		{"a reader claiming", func() error {
			_, err := reader.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "reader-r", Incarnation: "1"}, TTL: time.Minute})
			return err
		}, runstate.ErrPermissionDenied},
		{"a worker cancelling without a lease", func() error {
			_, err := workerB.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: run.Version, Status: "canceled"})
			return err
		}, runstate.ErrPermissionDenied},
		{"a malformed message", func() error {
			conn := w.rawConn(t)
			authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokenOf("operator-o"))
			var reply pb.Run
			err = conn.Invoke(authed, pb.RunStateStore_CreateRun_FullMethodName, []byte{0xff, 0xff, 0xff, 0x0f, 0x01}, &reply, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != codes.Internal { // grpc: error unmarshalling request
				return fmt.Errorf("a malformed request: %v, want INTERNAL", err)
			}
			return nil
		}, nil},
		{"a worker renewing another's lease", func() error {
			_, err := workerB.RenewLease(ctx, runstate.RenewLeaseParams{RunID: "r1", Token: claimA.Lease.Token, TTL: time.Hour})
			return err
		}, runstate.ErrPermissionDenied},
		{"a worker releasing under a token not yet issued", func() error {
			return workerB.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: "r1", Token: claimA.Lease.Token + 1})
		}, runstate.ErrPermissionDenied},
		{"a worker writing under a token not yet issued", func() error {
			_, err := workerB.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: run.Version, LeaseToken: claimA.Lease.Token + 1, Status: "running"})
			return err
		}, runstate.ErrPermissionDenied},
		{"a worker releasing another's lease", func() error {
			return workerB.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: "r1", Token: claimA.Lease.Token})
		}, runstate.ErrPermissionDenied},
		{"a worker writing under another's lease", func() error {
			_, err := workerB.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: run.Version, LeaseToken: claimA.Lease.Token, Status: "running"})
			return err
		}, runstate.ErrPermissionDenied},
		{"a worker claiming in another's name", func() error {
			_, err := workerB.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "worker-a", Incarnation: "2"}, TTL: time.Minute})
			return err
		}, runstate.ErrPermissionDenied},
		{"a worker claiming a named run in another's name", func() error {
			_, err := workerB.ClaimRun(ctx, runstate.ClaimRunParams{RunID: "r1", Owner: runstate.Owner{Worker: "worker-a", Incarnation: "2"}, TTL: time.Minute})
			return err
		}, runstate.ErrPermissionDenied},
		{"an oversized message", func() error {
			conn := w.rawConn(t)
			authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokenOf("operator-o"))
			_, err = pb.NewRunStateStoreClient(conn).CreateRun(authed, &pb.CreateRunRequest{WorkflowName: "w",
				Message: strings.Repeat("x", gateway.DefaultMaxMessageBytes+1)}, grpc.MaxCallSendMsgSize(4*gateway.DefaultMaxMessageBytes))
			if status.Code(err) != codes.ResourceExhausted {
				return fmt.Errorf("status %v, want RESOURCE_EXHAUSTED", err)
			}
			return nil
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.want == nil { // the case checks its refusal itself
				if err != nil {
					t.Fatal(err)
				}
				err = errors.New("")
			} else if !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v (code %q)", tc.want, err, runstate.CodeOf(err))
			}
			for _, p := range principals {
				if strings.Contains(err.Error(), p.token) {
					t.Fatalf("the error shows a token: %v", err)
				}
			}
			afterRun, afterEvents, afterLease := snapshot()
			if !reflect.DeepEqual(afterRun, beforeRun) || len(afterEvents) != len(beforeEvents) || afterLease != beforeLease {
				t.Fatalf("the store changed: %+v, lease %+v", afterRun, afterLease)
			}
		})
	}

	// The refusals are logged, by the gateway too, with no token in sight.
	logged := w.logs.String()
	for _, want := range []string{"TLS handshake failed", "UNAUTHENTICATED", "PERMISSION_DENIED", "principal=worker-b"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the gateway's log lacks %q", want)
		}
	}
	for _, p := range principals {
		if strings.Contains(logged, p.token) {
			t.Fatalf("the gateway's log shows %s's token", p.name)
		}
	}

	// Who holds a lease crosses the wire, for a reader too.
	lease, err := featuretest.Must(runstate.As[runstate.LeaseReader](reader)).GetLease(ctx, "r1")
	if err != nil || lease.Owner.Worker != "worker-a" || lease.Token != claimA.Lease.Token {
		t.Fatalf("GetLease through the gateway: %+v, %v", lease, err)
	}
	if _, err := featuretest.Must(runstate.As[runstate.LeaseReader](reader)).GetLease(ctx, "no-such-run"); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatalf("GetLease of an unknown run: %v", err)
	}

	// A worker renews and writes under its own lease; the trail names the
	// principal, whatever actor the call gave.
	if _, err := workerA.RenewLease(ctx, runstate.RenewLeaseParams{RunID: "r1", Token: claimA.Lease.Token, TTL: time.Minute}); err != nil {
		t.Fatalf("the holder renews its lease: %v", err)
	}
	updated, err := workerA.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: claimA.Run.Version, LeaseToken: claimA.Lease.Token,
		Status: "running", Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "someone-else"}})
	if err != nil {
		t.Fatalf("a fenced write of the lease holder: %v", err)
	}
	page, _ := operator.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: "r1"})
	last := page.Events[len(page.Events)-1]
	if last.Actor != (runstate.Actor{Kind: runstate.ActorWorker, ID: "worker-a", Principal: "worker-a"}) || last.Version != updated.Version {
		t.Fatalf("the write is recorded as %+v", last.Actor)
	}

	// A token revoked by a reload is refused from the next call on.
	revoked, err := gateway.ParseTokens(tokensFile("worker-a"))
	if err != nil {
		t.Fatal(err)
	}
	w.server.SetTokens(revoked)
	if _, err := workerA.GetRun(ctx, "r1"); !errors.Is(err, runstate.ErrUnauthenticated) {
		t.Fatalf("a revoked token: %v", err)
	}
	if _, err := workerB.GetRun(ctx, "r1"); err != nil {
		t.Fatalf("a token the reload kept: %v", err)
	}
}

// An operator's writes name its principal in the trail whatever actor, and
// whatever principal, the call names: the actor it names is kept as whom
// it acted for, never instead of the principal. Single writes and batches
// alike.
func TestTheTrailNamesTheOperatorsPrincipal(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	operator := w.dial(t, "operator-o")
	forged := runstate.Actor{Kind: runstate.ActorWorker, ID: "worker-b", Principal: "worker-b"}
	run, err := operator.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w", Actor: forged})
	if err != nil {
		t.Fatal(err)
	}
	run, err = operator.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: run.Version, Status: "running",
		Actor: runstate.Actor{Kind: runstate.ActorRecovery, ID: "recovery-of-worker-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.UpdateRun(ctx, runstate.UpdateRunParams{RunID: "r1", ExpectedVersion: run.Version, Status: "waiting", Reason: "by hand"}); err != nil {
		t.Fatal(err)
	}
	if _, err := featuretest.Must(runstate.As[runstate.BatchCreator](operator)).CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{{RunID: "r2", WorkflowName: "w", Actor: forged}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]runstate.Actor{
		"r1": {
			{Kind: runstate.ActorWorker, ID: "worker-b", Principal: "operator-o"},
			{Kind: runstate.ActorRecovery, ID: "recovery-of-worker-a", Principal: "operator-o"},
			{Kind: runstate.ActorOperator, ID: "operator-o", Principal: "operator-o"},
		},
		"r2": {{Kind: runstate.ActorWorker, ID: "worker-b", Principal: "operator-o"}},
	}
	for id, actors := range want {
		page, err := w.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		var got []runstate.Actor
		for _, e := range page.Events {
			got = append(got, e.Actor)
		}
		if !reflect.DeepEqual(got, actors) {
			t.Errorf("run %s's trail names %+v, want %+v", id, got, actors)
		}
	}
}

// Calls are counted by method and code, refusals by reason; the health
// service answers a probe without a token.
func TestTheGatewayCountsCallsAndAnswersProbes(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	w := newWorldWith(t, reg)
	reader := w.dial(t, "reader-r")
	if _, err := reader.GetRun(ctx, "nope"); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := reader.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); !errors.Is(err, runstate.ErrPermissionDenied) {
		t.Fatal(err)
	}
	if got := counterValue(t, reg, "runstate_gateway_requests_total", map[string]string{"method": "GetRun", "code": "NOT_FOUND"}); got != 1 {
		t.Errorf("GetRun NOT_FOUND counted %v times", got)
	}
	if n, err := testutil.GatherAndCount(reg, "runstate_gateway_refused_total"); err != nil || n != 1 {
		t.Errorf("refusal series: %d, %v", n, err)
	}
	conn := w.rawConn(t)
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
}

// counterValue reads the counter of name with exactly these labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if reflect.DeepEqual(got, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// rawCodec sends bytes as they are, to offer the gateway a message that
// is not protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// leased returns s with its lease side as one runstate.Store (nil without leases).
func leased(s runstate.RunStateStore) runstate.Store {
	st, _ := runstate.As[runstate.Store](s)
	return st
}
