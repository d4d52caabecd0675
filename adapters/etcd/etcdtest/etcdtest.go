// Package etcdtest is the conformance harness of the etcd adapter, shared
// by its tests and cmd/conformance-runner.
package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/etcd"
	"github.com/runstate/runstate/conformance"
)

// Target returns the etcd adapter's conformance target on the cluster at
// endpoints. Every check gets a prefix of its own, which its harness
// deletes when the check ends, and every handle is a client of its own,
// as a worker process would have: it declares leases (CAP-001) and a
// second handle (CAP-002). With manualClock every handle shares a clock
// the suite advances (CAP-003); otherwise the system clock decides.
func Target(endpoints []string, manualClock bool) conformance.Target {
	return conformance.Target{
		Name:         "etcd",
		StoreVersion: "etcd/client-v3",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			h := &harness{opts: etcd.Options{Endpoints: endpoints, Prefix: NewPrefix()}}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
				h.opts.Clock = h.clock
			}
			s, err := etcd.Open(ctx, h.opts)
			if err != nil {
				return nil, err
			}
			h.store = s
			return h, nil
		},
	}
}

// NewPrefix returns a key prefix no other check uses.
func NewPrefix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "runstate-test/" + hex.EncodeToString(b) + "/"
}

type harness struct {
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

// Close closes every handle and deletes the check's keys.
func (h *harness) Close(ctx context.Context) error {
	var errs []error
	for _, s := range h.handles {
		errs = append(errs, s.Close())
	}
	errs = append(errs, h.store.Close(), DeletePrefix(ctx, h.opts.Endpoints, h.opts.Prefix))
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
