package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/protocol"
)

// EnvToken names the variable a client reads its token from when Options
// gives none: tokens never belong on a command line.
const EnvToken = "RUNSTATE_GATEWAY_TOKEN"

// Options configure Dial.
type Options struct {
	// Token is the bearer token; empty reads TokenFile, then EnvToken.
	Token string
	// TokenFile holds the token (surrounding white space is ignored).
	TokenFile string
	// TLS secures the connection: its RootCAs verify the gateway, its
	// Certificates are the client's for mutual TLS. Nil with Plaintext unset
	// uses the system's roots.
	TLS *tls.Config
	// Plaintext connects without TLS, to a gateway on a loopback address.
	Plaintext bool
	// MaxMessageBytes bounds a message; defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int
}

// Client is a connection to a gateway. gRPC reconnects by itself after the
// gateway restarts; while it is down, calls fail with runstate.ErrUnavailable.
type Client struct {
	conn  *grpc.ClientConn
	store *protocol.RemoteStore
}

// Dial connects to the gateway at addr (host:port) and checks that it
// accepts the token.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	token, err := opts.token()
	if err != nil {
		return nil, err
	}
	if opts.Plaintext {
		if err := LoopbackOnly(addr); err != nil {
			return nil, err
		}
	}
	limit := opts.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	dial := []grpc.DialOption{grpc.WithPerRPCCredentials(bearer{token: token, secure: !opts.Plaintext}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)), tracing.DialOption()}
	if opts.Plaintext {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		cfg := opts.TLS
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, runstate.InvalidArgument("addr", "%v", err)
	}
	store, err := protocol.Connect(ctx, protocol.ConnectParams{Conn: conn, Peer: "gateway " + addr})
	if err != nil {
		conn.Close()
		if runstate.CodeOf(err) == runstate.CodeUnavailable {
			return nil, runstate.Unavailable(fmt.Sprintf("cannot reach the gateway at %s: is it running, and do both sides agree on TLS "+
				"(the CA that signed its certificate; a client certificate when it requires mutual TLS; plaintext on both sides or neither)?", addr), err)
		}
		return nil, err
	}
	return &Client{conn: conn, store: store}, nil
}

func (o Options) token() (string, error) {
	if o.Token != "" {
		return o.Token, nil
	}
	if o.TokenFile != "" {
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return "", runstate.InvalidArgument("token_file", "cannot read the token file: %v", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", runstate.InvalidArgument("token_file", "%s is empty", o.TokenFile)
	}
	if t := os.Getenv(EnvToken); t != "" {
		return t, nil
	}
	return "", &runstate.Error{Code: runstate.CodeUnauthenticated, Message: "no gateway token: give a token file (demo-runner --gateway-token-file) or set $" +
		EnvToken + " (in Go: Options.Token or Options.TokenFile)"}
}

// Store returns the gateway's store, with the features the gateway named
// (runstate.Features, read with runstate.As: runstate.As[runstate.Store]
// gives it with its leases).
func (c *Client) Store() runstate.RunStateStore { return c.store.Checked() }

// Info is what the gateway said of its store when the client connected:
// its protocol version and features among it.
func (c *Client) Info() protocol.StoreInfo { return c.store.Info() }

// Watcher returns the gateway's store as a runstate.RunnableWatcher when
// the gateway offers watching (its store announces runnable runs), else
// nil: then workers poll.
func (c *Client) Watcher() runstate.RunnableWatcher {
	if !c.store.Info().WatchRunnable {
		return nil
	}
	return c.store
}

// RunWatcher returns the gateway's store as a runstate.RunWatcher when the
// gateway offers watching a run (its store announces the writes of a
// run), else nil: then followers of a run poll.
func (c *Client) RunWatcher() runstate.RunWatcher {
	if !c.store.Info().WatchRun {
		return nil
	}
	return c.store
}

// SetClock moves the test clock of a gateway started in test mode
// (TestClockEnv) to to, for certification; it needs the operator role. A
// gateway not started so refuses it with protocol.ErrNoTestClock.
func (c *Client) SetClock(ctx context.Context, to time.Time) error { return c.store.SetClock(ctx, to) }

// Close ends the connection.
func (c *Client) Close() error {
	c.store.Close()
	return c.conn.Close()
}

// bearer sends the token with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// ClientTLS returns a client's TLS configuration: caFile (PEM) verifies the
// gateway (empty: the system's roots); certFile and keyFile, when given,
// are the client's certificate for mutual TLS.
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, runstate.InvalidArgument("tls", "cannot load the client certificate and key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
