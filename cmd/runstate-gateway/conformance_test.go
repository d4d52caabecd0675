package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/gateway/gatewaytest"
	"github.com/runstate/runstate/internal/testsupport/pathsmoke"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
	"github.com/runstate/runstate/internal/testsupport/testtls"
)

// The whole suite passes through a gateway process in front of
// PostgreSQL, from this (another) process, over mutual TLS, as an
// operator; in front of Badger and MySQL the rules of
// internal/testsupport/pathsmoke show the gateway serves those stores too
// (the gateway's code is the same whichever store is behind it, and each
// store runs the whole suite in its own package). Each check gets a
// gateway and a store of its own; the gateway runs in test mode, its store
// on the clock the checks move, and the FAULT rules kill it and start it
// again on the same store. The stores are checked directly by their own
// packages, so the LIN rules record fewer operations here
// (conformance.Repeated).
func TestConformanceThroughAGatewayProcess(t *testing.T) {
	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, tokens: filepath.Join(dir, "tokens.yaml"), ca: testtls.NewAuthority(t, "conformance CA")}
	f.writeTokens("")
	cert, key := testtls.WritePair(t, f.ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour)), dir, "gateway")
	client := f.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
	setup := gatewaytest.Setup{
		Bin:       binaries.Path(t, "github.com/runstate/runstate/cmd/runstate-gateway"),
		Args:      []string{"--tokens", f.tokens, "--tls-cert", cert, "--tls-key", key, "--client-ca", f.ca.WriteCA(t, dir, "ca.pem")},
		Dial:      gateway.Options{Token: fleetTokens["operator-o"].token, TLS: &tls.Config{RootCAs: f.ca.Pool, Certificates: []tls.Certificate{client}}},
		Principal: "operator-o",
		LogPath:   filepath.Join(dir, "gateway.log"),
		// Every store here outlives a gateway process, and none is a plugin.
		Restart:   true,
		TestClock: true,
	}
	t.Run("badger", func(t *testing.T) {
		conformance.Run(t, gatewaytest.ProcessTarget("badger", setup, func(context.Context) (string, func(), error) {
			store, err := os.MkdirTemp(dir, "store-*")
			return "badger:" + store, func() { os.RemoveAll(store) }, err
		}), pathsmoke.Rules...)
	})
	t.Run("mysql", func(t *testing.T) {
		srv := sqltest.MySQL.Find(t)
		conformance.Run(t, gatewaytest.ProcessTarget("mysql", setup, func(ctx context.Context) (string, func(), error) {
			db, err := srv.CreateDatabase(ctx)
			return "mysql:" + srv.DSN(db), func() { srv.DropDatabase(context.Background(), db) }, err
		}), pathsmoke.Rules...)
	})
	t.Run("postgres", func(t *testing.T) {
		srv := sqltest.Postgres.Find(t)
		conformance.Run(t, conformance.Repeated(gatewaytest.ProcessTarget("postgres", setup, func(ctx context.Context) (string, func(), error) {
			schema, err := srv.CreateSchema(ctx)
			return "postgres:" + srv.DSNIn(schema), func() { srv.DropSchema(context.Background(), schema) }, err
		})))
	})
}
