package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/access"
)

// serveOptions are serve's flags.
type serveOptions struct {
	addr, tlsCert, tlsKey, tokensFile string
	liveEvery                         time.Duration
	// livePollOnly: the console's live streams poll alone, even on a store
	// that announces its changes.
	livePollOnly bool
}

// check refuses, before anything listens, a serve that would expose the
// store: off loopback the console and the API need TLS and credentials.
func (o serveOptions) check() error {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usageError("--tls-cert and --tls-key go together: give both, or neither on a loopback address")
	}
	if o.liveEvery < 10*time.Millisecond {
		return usageError("--live-every %v: want at least 10ms, such as 1s", o.liveEvery)
	}
	if !loopbackAddr(o.addr) && (o.tlsCert == "" || o.tokensFile == "") {
		return usageError("--addr %s is not a loopback address: serving the store there needs --tls-cert, --tls-key "+
			"and --tokens-file (docs/demo-runner.md#access-control), or listen on 127.0.0.1", o.addr)
	}
	return nil
}

// loopbackAddr reports whether host:port listens on loopback only. An
// empty host (every interface) is not loopback.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopbackHost(host)
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loadTLS reads the certificate serve answers HTTPS with.
func (o serveOptions) loadTLS() (*tls.Config, error) {
	if o.tlsCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, usageError("--tls-cert/--tls-key: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// guard is serve's access control, in front of every route:
//   - with a tokens file, a route that needs a role needs a bearer token
//     of a principal with that role (401 without one, 403 below it);
//   - without one (loopback only), requests must name a loopback host, so
//     that a web page whose name resolves to 127.0.0.1 (DNS rebinding)
//     cannot read the API from a victim's browser;
//   - a state-changing request a browser sends from another origin is
//     refused (http.CrossOriginProtection: Sec-Fetch-Site, then Origin);
//     with tokens, a cross-site form cannot send the bearer header anyway.
type guard struct {
	tokens *access.Tokens // nil: no credentials (loopback only)
	origin *http.CrossOriginProtection
}

// principalKey carries the authenticated principal in a request's context.
type principalKey struct{}

// principalOf returns the principal a request was authenticated as.
func principalOf(r *http.Request) (access.Principal, bool) {
	p, ok := r.Context().Value(principalKey{}).(access.Principal)
	return p, ok
}

// wrap returns h behind the guard for a route that needs need ("" for
// none: health probes, the OpenAPI description, the console's own files,
// which hold no data).
func (a *app) wrap(g *guard, need access.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.tokens == nil && !loopbackHost(hostOnly(r.Host)) {
			a.problem(w, r, http.StatusForbidden, string(runstate.CodePermissionDenied),
				"this server listens on loopback without credentials and answers only requests for a loopback host name, such as 127.0.0.1 or localhost")
			return
		}
		if err := g.origin.Check(r); err != nil {
			a.problem(w, r, http.StatusForbidden, string(runstate.CodePermissionDenied),
				"a state-changing request from another origin is refused (cross-site request forgery protection)")
			return
		}
		if g.tokens == nil || need == "" {
			h(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		p, known := g.tokens.Authenticate(token)
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="demo-runner"`)
			a.problem(w, r, http.StatusUnauthorized, string(runstate.CodeUnauthenticated),
				"this server needs a bearer token of a principal in its tokens file (Authorization: Bearer TOKEN; the console asks for it)")
			return
		}
		if !p.Role.Allows(need) {
			a.problem(w, r, http.StatusForbidden, string(runstate.CodePermissionDenied),
				"principal "+p.Name+" is a "+string(p.Role)+": this needs the "+string(need)+" role")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// hostOnly is a Host header without its port.
func hostOnly(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return strings.Trim(hostport, "[]")
}

// newGuard loads the tokens file, if any.
func newGuard(o serveOptions) (*guard, error) {
	g := &guard{origin: http.NewCrossOriginProtection()}
	if o.tokensFile != "" {
		t, err := access.LoadTokens(o.tokensFile)
		if err != nil {
			return nil, usageError("--tokens-file: %v", err)
		}
		if t.Len() == 0 {
			return nil, usageError("--tokens-file %s names no principal: nobody could use the server", o.tokensFile)
		}
		g.tokens = t
	}
	return g, nil
}

// identity is GET /whoami's answer: who the caller is and may be.
type identity struct {
	// Credentials: serve checks tokens; when false anyone who reaches it
	// (on loopback) acts as an operator.
	Credentials bool        `json:"credentials"`
	Principal   string      `json:"principal,omitempty"`
	Role        access.Role `json:"role"`
}

func whoami(r *http.Request) identity {
	if p, ok := principalOf(r); ok {
		return identity{Credentials: true, Principal: p.Name, Role: p.Role}
	}
	return identity{Role: access.RoleOperator}
}
