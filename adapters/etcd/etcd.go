// Package etcd is the replicated reference adapter, on an etcd v3 cluster
// (go.etcd.io/etcd/client/v3): runs, their audit events and the indexes
// that listings and claims read are keys under one prefix, and every write
// is one etcd transaction that compares the mod revisions of the runs it
// read, so that of writers racing from one version exactly one wins. Reads
// are linearizable (quorum) reads, and a read of several keys reads them all
// at one revision. Any number of processes may share a prefix.
package etcd

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

var (
	_ runstate.Store          = (*Store)(nil)
	_ runstate.BatchCreator   = (*Store)(nil)
	_ driver.Driver           = (*storage)(nil)
	_ driver.NextClaimer      = (*storage)(nil)
	_ driver.BatchInserter    = (*storage)(nil)
	_ driver.BatchNextClaimer = (*storage)(nil)
)

// Options configure Open.
type Options struct {
	// Endpoints are the cluster's client URLs or host:port pairs; the client
	// moves to another member when one fails. Required.
	Endpoints []string
	// Prefix is prepended to every key the store writes (default
	// DefaultPrefix); stores with different prefixes share a cluster
	// without seeing each other.
	Prefix string
	// Username and Password authenticate to a cluster with auth enabled.
	Username, Password string
	// TLS, when set, connects with TLS (https endpoints).
	TLS *tls.Config
	// DialTimeout bounds Open's first contact with the cluster when ctx has
	// no deadline (default 5s).
	DialTimeout time.Duration
	// MaxTxnOps is the most operations one transaction may hold: the
	// cluster's --max-txn-ops (default DefaultMaxTxnOps, etcd's own). A
	// write that needs more is refused before it is sent, and a batch of
	// claims claims fewer runs (docs/etcd.md, sizing).
	MaxTxnOps int
	// Clock stamps times and decides lease expiry; defaults to the system
	// clock. Every process sharing a prefix needs a synchronised clock, as
	// etcd has no clock of its own to lend.
	Clock runstate.Clock
	// Logger receives the store's debug lines (every lease decision, see
	// driver.WrapOptions.Logger); defaults to slog.Default().
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultPrefix      = "runstate/"
	DefaultMaxTxnOps   = 128
	defaultDialTimeout = 5 * time.Second
)

// maxSendBytes is the largest request the client sends: above etcd's
// hard limit of --max-request-bytes, so that the cluster refuses instead.
const maxSendBytes = 64 << 20

// maxConflictRetries bounds the retries of a write that lost a race: each
// retry reads afresh, and of racing writers one wins every round, so a
// write retries about as often as writers race for its run.
const maxConflictRetries = 1000

// Store is a runstate store on an etcd cluster.
type Store struct {
	driver.Store
	data *storage
}

// storage is the etcd adapter's driver.Driver.
type storage struct {
	cli       *clientv3.Client
	k         keys
	clock     runstate.Clock
	maxTxnOps int
	where     string // endpoints and prefix, for messages

	// closeMu lets operations run concurrently with each other but not with Close.
	closeMu sync.RWMutex
	closed  bool
}

// Open connects to the cluster at opts.Endpoints and checks that it
// answers, and that the keys under the prefix are of a layout this build
// reads.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var endpoints []string
	for _, e := range opts.Endpoints {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	if len(endpoints) == 0 {
		return nil, runstate.InvalidArgument("endpoints", "name at least one etcd member, such as 127.0.0.1:2379")
	}
	if opts.MaxTxnOps < 0 {
		return nil, runstate.InvalidArgument("max_txn_ops", "is %d; leave it 0 for etcd's default of %d", opts.MaxTxnOps, DefaultMaxTxnOps)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	s := &storage{k: newKeys(prefix), clock: opts.Clock, maxTxnOps: opts.MaxTxnOps}
	if s.clock == nil {
		s.clock = driver.SystemClock{}
	}
	if s.maxTxnOps == 0 {
		s.maxTxnOps = DefaultMaxTxnOps
	}
	s.where = fmt.Sprintf("etcd %s (prefix %q)", strings.Join(endpoints, ","), s.k.prefix())
	dial := opts.DialTimeout
	if dial <= 0 {
		dial = defaultDialTimeout
	}
	// The client holds every endpoint and moves to another member when one
	// fails, so that the store serves while a minority is down (FAULT-008).
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: dial, TLS: opts.TLS,
		Username: opts.Username, Password: opts.Password,
		Logger:            zap.NewNop(),
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		// The cluster's --max-request-bytes decides what is too large, with
		// an error that says so, rather than the client's 2 MiB default.
		MaxCallSendMsgSize: maxSendBytes,
		Context:            context.WithoutCancel(ctx),
		// A member without a leader refuses the call at once rather than
		// holding it until a leader is back: with a quorum lost, calls
		// fail fast with UNAVAILABLE instead of waiting out the caller's
		// deadline (docs/etcd.md, Failures).
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(requireLeader)},
	})
	if err != nil {
		return nil, runstate.Unavailable("cannot connect to "+s.where, err)
	}
	s.cli = cli
	checkCtx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		checkCtx, cancel = context.WithTimeout(ctx, dial)
	}
	defer cancel()
	if err := s.checkSchema(checkCtx); err != nil {
		cli.Close()
		return nil, err
	}
	// No group commit: a shared write would be one transaction, bounded by
	// --max-txn-ops however many callers it carries, and one run changed
	// by another writer would send every caller's change again. etcd
	// batches concurrent proposals into its log by itself.
	return &Store{Store: driver.WrapWith(s, driver.WrapOptions{GroupCommit: driver.GroupCommit{Off: true}, Logger: cmp.Or(opts.Logger, slog.Default())}), data: s}, nil
}

// schemaVersion is stored under the key P m 0 schema; Open refuses a
// prefix written with a layout it does not know. Version 2 added the
// parked index (p); Open moves a prefix of version 1, which has no parked
// runs, to 2, so that an older build refuses it rather than misread a
// parked run.
const (
	schemaVersion       = "2"
	schemaBeforeParking = "1"
)

func (s *storage) checkSchema(ctx context.Context) error {
	key := s.k.meta("schema")
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, schemaVersion)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return s.interpret(ctx, fmt.Errorf("reaching the cluster: %w", err))
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 && string(kvs[0].Value) == schemaBeforeParking {
		// Moved only from what was read: two builds opening at once agree.
		_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", schemaBeforeParking)).
			Then(clientv3.OpPut(key, schemaVersion)).Commit()
		if err != nil {
			return s.interpret(ctx, fmt.Errorf("reaching the cluster: %w", err))
		}
		return nil
	}
	if len(kvs) == 1 && string(kvs[0].Value) != schemaVersion {
		return runstate.Unavailable(fmt.Sprintf("%s has keys of layout version %q; this build reads %q", s.where, kvs[0].Value, schemaVersion), nil)
	}
	return nil
}

// Close closes the connection to the cluster; later calls return
// runstate.ErrUnavailable. Close waits for calls in progress.
func (s *Store) Close() error { return s.data.close() }

func (s *storage) close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return runstate.Unavailable("closing the connection to "+s.where, err)
	}
	return nil
}

// CreateRuns implements runstate.BatchCreator: all runs or none, in one
// transaction.
func (s *Store) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.Store.Features().BatchCreator.CreateRuns(ctx, p)
}

// enter admits an operation after checking its context (CTX-001); the
// caller must call s.leave.
func (s *storage) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return runstate.Unavailable(s.where+" store is closed", nil)
	}
	return nil
}

func (s *storage) leave() { s.closeMu.RUnlock() }

func (s *storage) now() time.Time { return driver.Timestamp(s.clock.Now()) }

// Now implements driver.Driver.
func (s *storage) Now(context.Context) (time.Time, error) { return s.now(), nil }

// Keeps implements driver.Keeper: the parked runs have keys of their own,
// searched by wake time beside the unleased queue.
func (s *storage) Keeps() driver.Keeps { return driver.Keeps{Parking: true} }

// errConflict is an attempt's report that a compared revision had moved:
// another write came first, and the attempt is made again.
var errConflict = errors.New("a run changed since it was read")

// retry runs attempt until it does not lose a race (errConflict), with a
// short jittered backoff between attempts. Each attempt reads afresh, so
// a write commits only on what it read (CAS-003, LEASE-002), and takes
// effect atomically at its commit (LIN-001, LIN-002).
func (s *storage) retry(ctx context.Context, attempt func() error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	for n := 0; ; n++ {
		err := attempt()
		if !errors.Is(err, errConflict) {
			return s.interpret(ctx, err)
		}
		if n == maxConflictRetries {
			return runstate.Unavailable(fmt.Sprintf("%s: the write kept losing races with other writes of the same runs after %d attempts; try again", s.where, n), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.IntN(200*(min(n, 10)+1))) * time.Microsecond):
		}
	}
}

// read runs fn as a read of the store.
func (s *storage) read(ctx context.Context, fn func() error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return s.interpret(ctx, fn())
}

// interpret maps the client's errors to the contract's, in one place.
// Errors that are already the contract's pass unchanged; a call cut off
// by its context returns the context's error.
func (s *storage) interpret(ctx context.Context, err error) error {
	switch {
	case err == nil, runstate.CodeOf(err) != "":
		return err
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || isCode(err, codes.Canceled, codes.DeadlineExceeded)):
		return ctx.Err()
	case errors.Is(err, rpctypes.ErrTooManyRequests):
		return runstate.Unavailable(s.where+" is overloaded (too many requests); try again", err)
	case errors.Is(err, rpctypes.ErrNoSpace):
		return runstate.Unavailable(s.where+" is out of space (--quota-backend-bytes): compact and defragment it, then disarm the NOSPACE alarm (docs/etcd.md)", err)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return runstate.InvalidArgument("batch", "the write needs more operations in one etcd transaction than the cluster allows (--max-txn-ops, Options.MaxTxnOps %d); send fewer items at a time", s.maxTxnOps)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), isCode(err, codes.ResourceExhausted):
		return runstate.InvalidArgument("batch", "the write is larger than the cluster's request limit (--max-request-bytes); send fewer or smaller items at a time")
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeout):
		return runstate.Unavailable(s.where+" has no leader or lost it during the call: a quorum of its members is down or cut off; try again once they are back", err)
	case errors.Is(err, rpctypes.ErrCompacted):
		return runstate.Unavailable(s.where+": a read's revision was compacted while it read; try again", err)
	}
	return runstate.Unavailable(s.where+" failed", err)
}

// requireLeader asks the member to refuse a call while it has no leader.
func requireLeader(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(clientv3.WithRequireLeader(ctx), method, req, reply, cc, opts...)
}

func isCode(err error, cs ...codes.Code) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, c := range cs {
		if st.Code() == c {
			return true
		}
	}
	return false
}

// commit sends one transaction: ops if every comparison holds, else
// errConflict, with the runs named by reread as they are now (nil: missing),
// read in the same round trip, so that a retry need not read them again.
// A transaction over Options.MaxTxnOps is refused before it is sent,
// writing nothing.
func (s *storage) commit(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op, reread ...string) ([]*record, error) {
	if n := max(len(cmps), len(ops), len(reread)); n > s.maxTxnOps {
		return nil, runstate.InvalidArgument("batch", "the write needs %d operations in one etcd transaction, and the cluster allows %d (--max-txn-ops, Options.MaxTxnOps); send fewer items at a time", n, s.maxTxnOps)
	}
	orElse := make([]clientv3.Op, len(reread))
	for i, id := range reread {
		orElse[i] = clientv3.OpGet(s.k.run(id))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return nil, nil
	}
	fresh := make([]*record, len(reread))
	for i, res := range resp.Responses {
		if kvs := res.GetResponseRange().Kvs; len(kvs) > 0 {
			rec, err := decodeRun(kvs[0].Value, kvs[0].ModRevision)
			if err != nil {
				return nil, err
			}
			fresh[i] = &rec
		}
	}
	return fresh, errConflict
}
