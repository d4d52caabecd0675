// Package etcdtest is the conformance harness of the etcd adapter, shared
// by its tests and cmd/conformance-runner.
package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/etcd"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
)

// Cluster is a cluster of a test's own, whose members a harness may kill
// as a crash does and start again on their data.
type Cluster interface {
	KillLeader(ctx context.Context) error
	// KillFollower kills a member that does not lead.
	KillFollower(ctx context.Context) error
	KillAll(ctx context.Context) error
	// StartKilled starts the killed members and returns once the cluster
	// serves.
	StartKilled(ctx context.Context) error
}

// Target returns the etcd adapter's conformance target on the cluster at
// endpoints. Every check gets a prefix of its own, which its harness
// deletes when the check ends, and every handle is a client of its own,
// as a worker process would have: it declares leases (CAP-001) and a
// second handle (CAP-002). With manualClock every handle shares a clock
// the suite advances (CAP-003); otherwise the system clock decides.
//
// Where every endpoint is a plain host:port (or http:// URL), the handles
// reach each member through a faultproxy.Proxy of the check's own, and
// the target declares the proxies' faults: partition, reset and delay of
// the whole cluster. With a cluster of the test's own (members not nil)
// it declares restart (every member killed), member-restart and
// leader-restart too.
func Target(endpoints []string, manualClock bool, members Cluster) conformance.Target {
	addrs, proxyErr := proxyAddrs(endpoints)
	t := conformance.Target{
		Name:         "etcd",
		StoreVersion: "etcd/client-v3",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			h := &harness{opts: etcd.Options{Endpoints: endpoints, Prefix: NewPrefix()}, members: members, direct: endpoints}
			if proxyErr == nil {
				if err := h.startProxies(addrs); err != nil {
					h.closeProxies()
					return nil, err
				}
			}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
				h.opts.Clock = h.clock
			}
			s, err := etcd.Open(ctx, h.opts)
			if err != nil {
				h.closeProxies()
				return nil, err
			}
			h.store = s
			return h, nil
		},
	}
	if proxyErr == nil {
		t.Capabilities.Faults = slices.Clone(faultproxy.Faults)
	}
	if members != nil {
		t.Name += " (private cluster)"
		t.Capabilities.Faults = append(t.Capabilities.Faults, conformance.FaultRestart, conformance.FaultMemberRestart, conformance.FaultLeaderRestart)
	}
	return t
}

// proxyAddrs returns the host:port of every endpoint, or why a TCP proxy
// cannot stand in for one (TLS, a unix socket).
func proxyAddrs(endpoints []string) ([]string, error) {
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		addr := strings.TrimPrefix(strings.TrimSpace(e), "http://")
		if _, _, err := net.SplitHostPort(addr); err != nil || strings.Contains(addr, "/") {
			return nil, fmt.Errorf("endpoint %q is not host:port", e)
		}
		out[i] = addr
	}
	return out, nil
}

// startProxies puts a proxy in front of every member, and has the
// check's handles connect through them.
func (h *harness) startProxies(addrs []string) error {
	h.opts.Endpoints = nil
	for _, a := range addrs {
		p, err := faultproxy.Start(a)
		if err != nil {
			return err
		}
		h.proxies = append(h.proxies, p)
		h.opts.Endpoints = append(h.opts.Endpoints, p.Addr())
	}
	return nil
}

func (h *harness) closeProxies() {
	for _, p := range h.proxies {
		p.Close()
	}
}

// NewPrefix returns a key prefix no other check uses.
func NewPrefix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "runstate-test/" + hex.EncodeToString(b) + "/"
}

type harness struct {
	members Cluster  // nil: no member faults
	direct  []string // the members' endpoints, not through the proxies
	proxies []*faultproxy.Proxy
	opts    etcd.Options
	clock   *conformance.ManualClock
	store   *etcd.Store
	handles []*etcd.Store
}

func (h *harness) Store() runstate.RunStateStore { return h.store }

func (h *harness) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	s, err := etcd.Open(ctx, h.opts)
	if err != nil {
		return nil, err
	}
	h.handles = append(h.handles, s)
	return s, nil
}

func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }

// StartFault implements conformance.FaultInjector: the proxies' faults
// on every proxy at once, or members killed.
func (h *harness) StartFault(ctx context.Context, p conformance.FaultParams) error {
	if slices.Contains(faultproxy.Faults, p.Fault) {
		for _, px := range h.proxies {
			if err := px.StartFault(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}
	switch p.Fault {
	case conformance.FaultRestart:
		return h.members.KillAll(ctx)
	case conformance.FaultMemberRestart:
		return h.members.KillFollower(ctx)
	case conformance.FaultLeaderRestart:
		return h.members.KillLeader(ctx)
	}
	return fmt.Errorf("the etcd harness cannot cause fault %q", p.Fault)
}

// EndFault implements conformance.FaultInjector: the proxies heal, and
// killed members start again on their data.
func (h *harness) EndFault(ctx context.Context) error {
	for _, px := range h.proxies {
		if err := px.EndFault(ctx); err != nil {
			return err
		}
	}
	if h.members == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return h.members.StartKilled(ctx)
}

// Close closes every handle and deletes the check's keys.
func (h *harness) Close(ctx context.Context) error {
	var errs []error
	for _, s := range h.handles {
		errs = append(errs, s.Close())
	}
	errs = append(errs, h.store.Close(), DeletePrefix(ctx, h.direct, h.opts.Prefix))
	h.closeProxies()
	return errors.Join(errs...)
}

// DeletePrefix deletes every key under prefix: a check's, when it ends.
func DeletePrefix(ctx context.Context, endpoints []string, prefix string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err = cli.Delete(ctx, prefix, clientv3.WithPrefix())
	return err
}
