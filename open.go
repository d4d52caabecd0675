package runstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Store names. A store is named "scheme:arg" — memory, badger:PATH,
// mysql:DSN, postgres:DSN, plugin:PATH, gateway:HOST:PORT — and OpenStore
// opens it, in the manner of database/sql.Open: every kind of store
// registers its scheme with RegisterScheme in its package's init, and a
// program imports the kinds it offers. The registry lives here, beside the
// contract, because every kind already imports this package and no kind
// imports another: a package of its own would only add a name to learn.

// StoreName is a store name split at its first colon.
type StoreName struct {
	// Scheme is the part before the colon, as given (postgres or postgresql).
	Scheme string
	// Arg is what follows the colon: a path, a DSN, an address; empty for memory.
	Arg string
}

// ParseStoreName splits name at its first colon. It checks nothing:
// CheckStoreName does.
func ParseStoreName(name string) StoreName {
	scheme, arg, _ := strings.Cut(name, ":")
	return StoreName{Scheme: scheme, Arg: arg}
}

// String returns the name as given, secrets included: show RedactStoreName's instead.
func (n StoreName) String() string {
	if n.Arg == "" {
		return n.Scheme
	}
	return n.Scheme + ":" + n.Arg
}

// OpenFunc opens the store a name of its scheme names.
type OpenFunc func(ctx context.Context, name StoreName, opts OpenOptions) (*OpenedStore, error)

// StoreScheme is one kind of store that OpenStore can open by name.
type StoreScheme struct {
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
	// Settings are the keys of OpenOptions.Settings the scheme takes.
	Settings []string
	// Check refuses an argument that cannot work, before anything opens;
	// nil accepts any. Its message follows "SCHEME:ARG: " and must not
	// repeat a secret.
	Check func(name StoreName) error
	// Redact returns the name fit for messages and logs; nil shows it as is.
	Redact func(name StoreName) string
	// Open opens the store.
	Open OpenFunc
}

// form is how a name of the scheme looks in messages: badger:PATH.
func (s StoreScheme) form() string {
	if s.Arg == "" {
		return s.Name
	}
	return s.Name + ":" + s.Arg
}

// OpenOptions configure OpenStore. Each scheme uses the fields that
// concern it and ignores the others.
type OpenOptions struct {
	// Logger receives the store's own logs, and a line saying which store
	// is in use (and a warning for one that keeps nothing); nil discards them.
	Logger *slog.Logger
	// MaxOpenConns bounds a SQL store's connection pool; 0 leaves the
	// adapter's default.
	MaxOpenConns int
	// NotifyRunnable has a PostgreSQL store announce runnable runs to
	// workers that watch it (docs/postgres.md).
	NotifyRunnable bool
	// Hold says the process runs for long: a scheme whose store processes
	// can share (the demo runner's Badger) holds it and shares it.
	Hold bool
	// Settings are a scheme's own key=value settings, as a plugin's
	// configuration gives them (StoreScheme.Settings lists the keys; a
	// setting wins over the field above that it duplicates).
	Settings map[string]string
	// Plugin configures a plugin:PATH store.
	Plugin PluginOpenOptions
	// Gateway configures a gateway:HOST:PORT store.
	Gateway GatewayOpenOptions
	// Override opens the schemes it names in place of their registered
	// openers: a program's own way to open one kind.
	Override map[string]OpenFunc
}

// PluginOpenOptions configure a plugin:PATH store.
type PluginOpenOptions struct {
	// Config is the plugin's configuration, key=value.
	Config map[string]string
	// Relaunch starts a plugin that died again, so that a long-running
	// process outlives it.
	Relaunch bool
}

// GatewayOpenOptions configure a gateway:HOST:PORT store (docs/gateway.md).
type GatewayOpenOptions struct {
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
func (o OpenOptions) Log() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// BoolSetting returns the setting key: true, false, or def when unset.
func (o OpenOptions) BoolSetting(key string, def bool) (bool, error) {
	switch v := o.Settings[key]; v {
	case "":
		return def, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, InvalidArgument(key, "%q: want true or false", v)
	}
}

// PositiveSetting returns the setting key, a positive number, or def when unset.
func (o OpenOptions) PositiveSetting(key string, def int) (int, error) {
	v := o.Settings[key]
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, InvalidArgument(key, "%q is not a positive number", v)
	}
	return n, nil
}

// OpenedStore is a store OpenStore opened.
type OpenedStore struct {
	// Runs is the store.
	Runs RunStateStore
	// Close closes it.
	Close func() error
}

// Leases returns the same store with its leases, nil when it has none.
func (o *OpenedStore) Leases() Store {
	s, _ := o.Runs.(Store)
	return s
}

var schemes = struct {
	sync.RWMutex
	byName map[string]StoreScheme // by name and by alias
}{byName: map[string]StoreScheme{}}

// RegisterScheme makes a kind of store openable by name. Like
// database/sql.Register it panics when the scheme is registered already,
// or lacks a name or an Open: both are a program's mistake.
func RegisterScheme(s StoreScheme) {
	schemes.Lock()
	defer schemes.Unlock()
	if s.Name == "" || s.Open == nil {
		panic("runstate: RegisterScheme needs a Name and an Open")
	}
	for _, name := range append([]string{s.Name}, s.Aliases...) {
		if _, dup := schemes.byName[name]; dup {
			panic("runstate: RegisterScheme called twice for scheme " + name)
		}
		schemes.byName[name] = s
	}
}

// LookupScheme returns the scheme registered under name or alias.
func LookupScheme(name string) (StoreScheme, bool) {
	schemes.RLock()
	defer schemes.RUnlock()
	s, ok := schemes.byName[name]
	return s, ok
}

// Schemes returns the registered schemes: those that take nothing after
// them first, then by name.
func Schemes() []StoreScheme {
	schemes.RLock()
	defer schemes.RUnlock()
	var out []StoreScheme
	for name, s := range schemes.byName {
		if name == s.Name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b StoreScheme) int {
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

// StoreNameForms lists the names OpenStore takes, for messages and help:
// "memory, badger:PATH, … or gateway:HOST:PORT".
func StoreNameForms() string {
	var forms []string
	for _, s := range Schemes() {
		forms = append(forms, s.form())
	}
	if len(forms) < 2 {
		return strings.Join(forms, "")
	}
	return strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

// RedactStoreName returns name fit for messages and logs: a DSN's
// password replaced, and of a name of no registered scheme only its
// scheme (it may be a DSN given without one).
func RedactStoreName(name string) string {
	n := ParseStoreName(name)
	s, ok := LookupScheme(n.Scheme)
	switch {
	case !ok && strings.Contains(name, ":"):
		return n.Scheme + ":…"
	case !ok, s.Redact == nil:
		return name
	}
	return s.Redact(n)
}

// CheckStoreName refuses a name OpenStore cannot open, before anything
// opens, with an ErrInvalidArgument (Field "store") whose Message says
// what to give instead and shows no secret. Commands prefix the Message
// with their flag: "--store " + Message.
func CheckStoreName(name string) error {
	n := ParseStoreName(name)
	s, ok := LookupScheme(n.Scheme)
	switch {
	case !ok:
		return badName("%q: want %s", RedactStoreName(name), StoreNameForms())
	case s.Arg == "" && n.Arg != "":
		return badName("%q: %s takes nothing after it; want %s", RedactStoreName(name), s.Name, StoreNameForms())
	case s.Arg != "" && n.Arg == "":
		return badName("%s needs %s, e.g. %s", s.form(), s.ArgMeans, s.Example)
	case s.Check != nil:
		if err := s.Check(n); err != nil {
			return badName("%s:%s: %s", n.Scheme, s.Arg, MessageOf(err))
		}
	}
	return nil
}

// OpenStore opens the store name names (see CheckStoreName for the names
// it refuses). The caller closes it with OpenedStore.Close.
func OpenStore(ctx context.Context, name string, opts OpenOptions) (*OpenedStore, error) {
	if err := CheckStoreName(name); err != nil {
		return nil, err
	}
	n := ParseStoreName(name)
	s, _ := LookupScheme(n.Scheme)
	for key := range opts.Settings {
		if !slices.Contains(s.Settings, key) {
			return nil, InvalidArgument(key, "is not a setting of the %s store (it takes %s)", s.Name, strings.Join(s.Settings, ", "))
		}
	}
	open := s.Open
	if o, ok := opts.Override[s.Name]; ok {
		open = o
	}
	return open(ctx, n, opts)
}

func badName(format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: "store", Message: fmt.Sprintf(format, args...)}
}

// MessageOf returns err's message without the "runstate: " prefix: the
// Message of a runstate *Error, else err.Error().
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Message != "" && e.Cause == nil {
		return strings.TrimPrefix(e.Message, errPrefix)
	}
	return strings.TrimPrefix(err.Error(), errPrefix)
}
