package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runstate/runstate/adapters/mysql/testserver"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/testtls"
	"github.com/runstate/runstate/spec"
)

// The whole suite passes through a gateway process in front of Badger and
// in front of MySQL, from this (another) process, over mutual TLS, as an
// operator. Each check gets a gateway and a store of its own; the second
// handle is a second connection, as a second worker's.
func TestConformanceThroughAGatewayProcess(t *testing.T) {
	for _, kind := range []string{"badger", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			conformance.Run(t, gatewayTarget(t, kind))
		})
	}
}

func gatewayTarget(t *testing.T, kind string) conformance.Target {
	f := &fleet{t: t, dir: t.TempDir(), ca: testtls.NewAuthority(t, "conformance CA")}
	f.tokens = filepath.Join(f.dir, "tokens.yaml")
	f.writeTokens("")
	cert, key := testtls.WritePair(t, f.ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour)), f.dir, "gateway")
	f.clients = f.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
	args := []string{"--tokens", f.tokens, "--tls-cert", cert, "--tls-key", key, "--client-ca", f.ca.WriteCA(t, f.dir, "ca.pem"), "--listen", "127.0.0.1:0"}
	bin := binaries.Path(t, "github.com/runstate/runstate/cmd/runstate-gateway")
	var newStore func(ctx context.Context) (string, func(), error)
	switch kind {
	case "badger":
		newStore = func(context.Context) (string, func(), error) {
			dir, err := os.MkdirTemp(f.dir, "store-*")
			return "badger:" + dir, func() { os.RemoveAll(dir) }, err
		}
	case "mysql":
		srv := testserver.Find(t)
		newStore = func(ctx context.Context) (string, func(), error) {
			db, err := srv.CreateDatabase(ctx)
			return "mysql:" + srv.DSN(db), func() { srv.DropDatabase(context.Background(), db) }, err
		}
	}
	return conformance.Target{
		Name:         kind + " through a gateway process",
		StoreVersion: "gateway",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			store, drop, err := newStore(ctx)
			if err != nil {
				return nil, err
			}
			h := &processHarness{drop: drop}
			cmd, addr, err := startGateway(bin, append([]string{"--store", store}, args...), filepath.Join(f.dir, "gateway.log"))
			if err != nil {
				drop()
				return nil, err
			}
			h.kill = func() { cmd.Process.Kill(); cmd.Wait() }
			h.dial = func(ctx context.Context) (spec.RunStateStore, error) {
				c, err := gateway.Dial(ctx, addr, gateway.Options{Token: fleetTokens["operator-o"].token,
					TLS: &tls.Config{RootCAs: f.ca.Pool, Certificates: []tls.Certificate{f.clients}}})
				if err != nil {
					return nil, err
				}
				h.clients = append(h.clients, c)
				return c.Store(), nil
			}
			if h.first, err = h.dial(ctx); err != nil {
				return nil, errors.Join(err, h.Close(ctx))
			}
			return h, nil
		},
	}
}

type processHarness struct {
	first   spec.RunStateStore
	dial    func(context.Context) (spec.RunStateStore, error)
	clients []*gateway.Client
	kill    func()
	drop    func()
}

func (h *processHarness) Store() spec.RunStateStore { return h.first }
func (h *processHarness) OpenHandle(ctx context.Context) (spec.RunStateStore, error) {
	return h.dial(ctx)
}
func (h *processHarness) Advance(time.Duration) { panic("a gateway process keeps real time") }
func (h *processHarness) Close(context.Context) error {
	for _, c := range h.clients {
		c.Close()
	}
	h.kill()
	h.drop()
	return nil
}
