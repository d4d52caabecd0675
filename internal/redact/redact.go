// Package redact keeps secrets out of logs, errors, reports and HTTP
// answers: every place that shows a URL or a configuration passes it
// through here first. Store names go through stores.Redact,
// whose schemes use DSN and PostgresDSN.
package redact

import (
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// Mark replaces a secret wherever one was.
const Mark = "<redacted>"

// secretWords mark names (configuration keys, query parameters) whose
// values are secret.
var secretWords = []string{"dsn", "password", "passwd", "secret", "token", "credential", "apikey", "api_key", "signature", "auth"}

// SecretName reports whether a key or parameter name says its value is secret.
func SecretName(name string) bool {
	lower := strings.ToLower(name)
	return slices.ContainsFunc(secretWords, func(w string) bool { return strings.Contains(lower, w) })
}

// Config returns config with the values of secret keys, and of the keys
// listed in secret, replaced by Mark.
func Config(config map[string]string, secret []string) map[string]string {
	out := maps.Clone(config)
	for k := range out {
		if slices.Contains(secret, k) || SecretName(k) {
			out[k] = Mark
		}
	}
	return out
}

// URL returns raw with its password and the values of secret-named query
// parameters replaced by Mark. A string that does not parse as a URL is
// not shown at all: it could hold anything.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), Mark)
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if SecretName(k) {
				q[k] = []string{Mark}
			}
		}
		u.RawQuery = q.Encode()
	}
	// Encoding would turn the mark's brackets into %3C…%3E; keep it legible.
	return strings.NewReplacer(url.QueryEscape(Mark), Mark, url.PathEscape(Mark), Mark).Replace(u.String())
}

// postgresPassword finds the password of a keyword/value PostgreSQL DSN:
// password=secret or password='a secret', with \' and \\ escapes, and
// sslpassword likewise.
var postgresPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// PostgresDSN returns a PostgreSQL DSN, a URL or keyword/value pairs, with
// its password replaced by Mark.
func PostgresDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return URL(dsn)
	}
	return postgresPassword.ReplaceAllString(dsn, "${1}"+Mark)
}

// DSN returns a MySQL DSN with its password replaced by Mark. A DSN that
// does not parse is not shown.
func DSN(dsn string) string {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "<unparseable DSN>"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = Mark
	}
	return cfg.FormatDSN()
}
