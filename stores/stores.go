// Package stores opens a runstate store by its name, "scheme:arg" —
// memory, badger:PATH, mysql:DSN, postgres:DSN, etcd:ENDPOINTS, plugin:PATH,
// gateway:HOST:PORT — in the manner of database/sql.Open and Go CDK's URL
// openers: every kind of store registers its scheme with Register in its
// package's init, and a program imports the kinds it offers. Commands take
// the same names (--store), check them with Check and show them with
// Redact, so that a name means one thing everywhere and a secret in a DSN
// is never printed. It lives apart from the contract (package runstate)
// because it knows the options of particular kinds (a plugin's
// configuration, a gateway's TLS files), which the contract does not.
package stores

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/runstate/runstate"
)

// Name is a store name split at its first colon.
type Name struct {
	// Scheme is the part before the colon, as given (postgres or postgresql).
	Scheme string
	// Arg is what follows the colon: a path, a DSN, an address; empty for memory.
	Arg string
}

// Parse splits name at its first colon. It checks nothing:
// Check does.
func Parse(name string) Name {
	scheme, arg, _ := strings.Cut(name, ":")
	return Name{Scheme: scheme, Arg: arg}
}

// String returns the name as given, secrets included: show Redact's instead.
func (n Name) String() string {
	if n.Arg == "" {
		return n.Scheme
	}
	return n.Scheme + ":" + n.Arg
}

// OpenFunc opens the store a name of its scheme names.
type OpenFunc func(ctx context.Context, name Name, opts Options) (*Opened, error)

// Scheme is one kind of store that Open can open by name.
type Scheme struct {
	// Name is the scheme: the part of a store name before its first colon.
	Name string
	// Aliases are other schemes for the same kind (postgresql).
	Aliases []string
	// Arg names what follows the colon in messages (PATH, DSN, HOST:PORT);
	// empty when the scheme takes nothing after it (memory).
	Arg string
	// ArgMeans says what Arg is, for a name that lacks it ("a directory").
	ArgMeans string
	// Example is a whole name of this scheme, shown when Arg is missing.
	Example string
	// Settings are the keys of Options.Settings the scheme takes.
	Settings []string
	// Check refuses an argument that cannot work, before anything opens;
	// nil accepts any. Its message follows "SCHEME:ARG: " and must not
	// repeat a secret.
	Check func(name Name) error
	// Redact returns the name fit for messages and logs; nil shows it as is.
	Redact func(name Name) string
	// Open opens the store.
	Open OpenFunc
}

// form is how a name of the scheme looks in messages: badger:PATH.
func (s Scheme) form() string {
	if s.Arg == "" {
		return s.Name
	}
	return s.Name + ":" + s.Arg
}

// Options configure Open. Each scheme uses the fields that
// concern it and ignores the others.
type Options struct {
	// Logger receives the store's own logs, and a line saying which store
	// is in use (and a warning for one that keeps nothing). Nil leaves each
	// kind to its default: the adapters log to slog.Default(), the plugin
	// and gateway schemes' own lines are dropped.
	Logger *slog.Logger
	// MaxOpenConns bounds a SQL store's connection pool; 0 leaves the
	// adapter's default.
	MaxOpenConns int
	// NotifyRunnable has a PostgreSQL store announce runnable runs to
	// workers that watch it (docs/postgres.md).
	NotifyRunnable bool
	// NotifyRuns has a PostgreSQL store announce every write of a run to
	// the run's watchers (runstate.RunWatcher), such as a console's pages.
	NotifyRuns bool
	// Clock, when set, stamps the store's times and judges its leases in
	// place of the kind's own clock (the system's or the database's): a
	// plugin's test clock, for certification (docs/plugins.md).
	Clock runstate.Clock
	// Hold says the process runs for long: a scheme whose store processes
	// can share (the demo runner's Badger) holds it and shares it.
	Hold bool
	// Settings are a scheme's own key=value settings, as a plugin's
	// configuration gives them (Scheme.Settings lists the keys; a
	// setting wins over the field above that it duplicates).
	Settings map[string]string
	// Plugin configures a plugin:PATH store.
	Plugin PluginOptions
	// Gateway configures a gateway:HOST:PORT store.
	Gateway GatewayOptions
	// Override opens the schemes it names in place of their registered
	// openers: a program's own way to open one kind.
	Override map[string]OpenFunc
}

// PluginOptions configure a plugin:PATH store.
type PluginOptions struct {
	// Config is the plugin's configuration, key=value.
	Config map[string]string
	// Relaunch starts a plugin that died again, so that a long-running
	// process outlives it.
	Relaunch bool
	// AcceptNoPrincipal writes through a plugin that cannot record
	// principals without them, instead of refusing the writes
	// (plugin.Options.AcceptNoPrincipal).
	AcceptNoPrincipal bool
}

// GatewayOptions configure a gateway:HOST:PORT store (docs/gateway.md).
type GatewayOptions struct {
	// CAFile holds the CA certificates that sign the gateway's certificate;
	// empty trusts the system's.
	CAFile string
	// CertFile and KeyFile are this client's certificate, for a gateway
	// that requires mutual TLS.
	CertFile, KeyFile string
	// TokenFile holds the bearer token; empty takes it from the environment.
	TokenFile string
	// Plaintext reaches a gateway on this machine without TLS.
	Plaintext bool
}

// Log returns the logger to use: Logger, or one that discards.
func (o Options) Log() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// BoolSetting returns the setting key: true, false, or def when unset.
func (o Options) BoolSetting(key string, def bool) (bool, error) {
	switch v := o.Settings[key]; v {
	case "":
		return def, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, runstate.InvalidArgument(key, "%q: want true or false", v)
	}
}

// PositiveSetting returns the setting key, a positive number, or def when unset.
func (o Options) PositiveSetting(key string, def int) (int, error) {
	v := o.Settings[key]
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, runstate.InvalidArgument(key, "%q is not a positive number", v)
	}
	return n, nil
}

// Opened is a store Open opened.
type Opened struct {
	// Runs is the store.
	Runs runstate.RunStateStore
	// Close closes it.
	Close func() error
	// Watch, when set, announces runnable runs for a store that is not a
	// runstate.RunnableWatcher itself (one across a plugin or a gateway
	// that offers it); see Watcher.
	Watch runstate.RunnableWatcher
	// WatchRuns, when set, announces the writes of a run for a store that
	// is not a runstate.RunWatcher itself; see RunWatcher.
	WatchRuns runstate.RunWatcher
}

// Leases returns the same store with its leases, nil when it has none.
func (o *Opened) Leases() runstate.Store {
	s, _ := runstate.As[runstate.Store](o.Runs)
	return s
}

// Watcher returns what announces the store's runnable runs (Watch, else
// the store's feature), nil when nothing does: then workers poll.
func (o *Opened) Watcher() runstate.RunnableWatcher {
	if o.Watch != nil {
		return o.Watch
	}
	w, _ := runstate.As[runstate.RunnableWatcher](o.Runs)
	return w
}

// RunWatcher returns what announces the writes of a run (WatchRuns, else
// the store's feature), nil when nothing does: then followers of a run
// poll.
func (o *Opened) RunWatcher() runstate.RunWatcher {
	if o.WatchRuns != nil {
		return o.WatchRuns
	}
	w, _ := runstate.As[runstate.RunWatcher](o.Runs)
	return w
}

var schemes = struct {
	sync.RWMutex
	byName map[string]Scheme // by name and by alias
}{byName: map[string]Scheme{}}

// Register makes a kind of store openable by name. Like
// database/sql.Register it panics when the scheme is registered already,
// or lacks a name or an Open: both are a program's mistake.
func Register(s Scheme) {
	schemes.Lock()
	defer schemes.Unlock()
	if s.Name == "" || s.Open == nil {
		panic("stores: Register needs a Name and an Open")
	}
	for _, name := range append([]string{s.Name}, s.Aliases...) {
		if _, dup := schemes.byName[name]; dup {
			panic("stores: Register called twice for scheme " + name)
		}
		schemes.byName[name] = s
	}
}

// Lookup returns the scheme registered under name or alias.
func Lookup(name string) (Scheme, bool) {
	schemes.RLock()
	defer schemes.RUnlock()
	s, ok := schemes.byName[name]
	return s, ok
}

// Schemes returns the registered schemes: those that take nothing after
// them first, then by name.
func Schemes() []Scheme {
	schemes.RLock()
	defer schemes.RUnlock()
	var out []Scheme
	for name, s := range schemes.byName {
		if name == s.Name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Scheme) int {
		if (a.Arg == "") != (b.Arg == "") {
			if a.Arg == "" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Forms lists the names Open takes, for messages and help:
// "memory, badger:PATH, … or gateway:HOST:PORT".
func Forms() string {
	var forms []string
	for _, s := range Schemes() {
		forms = append(forms, s.form())
	}
	if len(forms) < 2 {
		return strings.Join(forms, "")
	}
	return strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

// Redact returns name fit for messages and logs: a DSN's
// password replaced, and of a name of no registered scheme only its
// scheme (it may be a DSN given without one).
func Redact(name string) string {
	n := Parse(name)
	s, ok := Lookup(n.Scheme)
	switch {
	case !ok && strings.Contains(name, ":"):
		return n.Scheme + ":…"
	case !ok, s.Redact == nil:
		return name
	}
	return s.Redact(n)
}

// Check refuses a name Open cannot open, before anything
// opens, with an ErrInvalidArgument (Field "store") whose Message says
// what to give instead and shows no secret. Commands prefix the Message
// with their flag: "--store " + Message.
func Check(name string) error {
	n := Parse(name)
	s, ok := Lookup(n.Scheme)
	switch {
	case !ok:
		return badName("%q: want %s", Redact(name), Forms())
	case s.Arg == "" && n.Arg != "":
		return badName("%q: %s takes nothing after it; want %s", Redact(name), s.Name, Forms())
	case s.Arg != "" && n.Arg == "":
		return badName("%s needs %s, e.g. %s", s.form(), s.ArgMeans, s.Example)
	case s.Check != nil:
		if err := s.Check(n); err != nil {
			return badName("%s:%s: %s", n.Scheme, s.Arg, runstate.MessageOf(err))
		}
	}
	return nil
}

// Open opens the store name names (see Check for the names
// it refuses). The caller closes it with Opened.Close.
func Open(ctx context.Context, name string, opts Options) (*Opened, error) {
	if err := Check(name); err != nil {
		return nil, err
	}
	n := Parse(name)
	s, _ := Lookup(n.Scheme)
	for key := range opts.Settings {
		if !slices.Contains(s.Settings, key) {
			return nil, runstate.InvalidArgument(key, "is not a setting of the %s store (it takes %s)", s.Name, strings.Join(s.Settings, ", "))
		}
	}
	open := s.Open
	if o, ok := opts.Override[s.Name]; ok {
		open = o
	}
	return open(ctx, n, opts)
}

func badName(format string, args ...any) *runstate.Error {
	return &runstate.Error{Code: runstate.CodeInvalidArgument, Field: "store", Message: fmt.Sprintf(format, args...)}
}
