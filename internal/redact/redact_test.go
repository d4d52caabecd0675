package redact

import (
	"strings"
	"testing"
)

func TestSecretsNeverSurvive(t *testing.T) {
	const pw = "s3cr3t-Pa55"
	cases := []struct{ name, in, keep string }{
		{"URL password", "https://user:" + pw + "@hooks.example.com/x?run=1", "https://user:<redacted>@hooks.example.com/x?run=1"},
		{"URL token parameter", "https://hooks.example.com/x?token=" + pw + "&run=1", "https://hooks.example.com/x?run=1&token=<redacted>"},
		{"URL without secrets", "http://127.0.0.1:9/hook", "http://127.0.0.1:9/hook"},
		{"unparseable URL", "http://user:" + pw + "@[::1", "<unparseable URL>"},
	}
	for _, c := range cases {
		got := URL(c.in)
		if strings.Contains(got, pw) || got != c.keep {
			t.Errorf("%s: %q became %q, want %q", c.name, c.in, got, c.keep)
		}
	}
}

func TestConfigRedactsByNameAndList(t *testing.T) {
	got := Config(map[string]string{"dsn": "x", "DB_Password": "x", "dir": "/d", "region": "eu"}, []string{"region"})
	want := map[string]string{"dsn": Mark, "DB_Password": Mark, "dir": "/d", "region": Mark}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
