package scratch

import (
	"strings"
	"testing"
)

// A proxy can stand in for a server reached over TCP without name-checked
// TLS only; DSNVia keeps every other setting, in URL and keyword form.
func TestProxyAddrAndDSNVia(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u:pw@db:5432/test?sslmode=disable":         "db:5432",
		"host=db port=5433 user=u dbname=test sslmode=require": "db:5433",
		"host=/var/run/postgresql user=u dbname=test":          "",
		"postgres://u@db.example.com/test?sslmode=verify-full": "",
	} {
		s, err := FromDSNUnchecked(dsn, "test")
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ProxyAddr()
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%s: %q, %v; want %q", dsn, got, err, want)
			continue
		}
		if want == "" {
			continue
		}
		via, err := s.DSNVia("127.0.0.1:6000")
		if err != nil {
			t.Fatal(err)
		}
		moved, err := FromDSNUnchecked(via, "test")
		if err != nil {
			t.Fatal(err)
		}
		if addr, _ := moved.ProxyAddr(); addr != "127.0.0.1:6000" || !strings.Contains(via, "test") {
			t.Errorf("%s through the proxy: %s (address %s)", dsn, via, addr)
		}
	}
}
