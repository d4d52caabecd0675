package scratch

import "testing"

// A proxy can stand in for a server reached over plain TCP only: through
// a socket, or with TLS that checks the server's name, it cannot.
func TestProxyAddr(t *testing.T) {
	for dsn, want := range map[string]string{
		"root@tcp(127.0.0.1:3306)/":               "127.0.0.1:3306",
		"root@tcp(db:3306)/?tls=skip-verify":      "db:3306",
		"root@unix(/run/mysqld/mysqld.sock)/":     "",
		"root@tcp(db.example.com:3306)/?tls=true": "",
	} {
		s, err := FromDSNUnchecked(dsn, "test")
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ProxyAddr()
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%s: %q, %v; want %q", dsn, got, err, want)
		}
		if want != "" && s.DSNVia("d", "127.0.0.1:1") == s.DSN("d") {
			t.Errorf("%s: DSNVia kept the server's address", dsn)
		}
	}
}
