package access_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/access"
)

func entry(name, role, token string) string {
	return "  - name: " + name + "\n    role: " + role + "\n    token_sha256: " + access.HashToken(token) + "\n"
}

func TestTokensAuthenticateTheirPrincipals(t *testing.T) {
	tokens, err := access.ParseTokens([]byte("principals:\n" + entry("rita", "reader", "rita-secret") + entry("olivia", "operator", "olivia-secret")))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tokens.Authenticate("olivia-secret"); !ok || p.Name != "olivia" || p.Role != access.RoleOperator {
		t.Errorf("olivia's token: %+v %v", p, ok)
	}
	for _, bad := range []string{"", "rita", "olivia-secret "} {
		if p, ok := tokens.Authenticate(bad); ok {
			t.Errorf("token %q authenticated %+v", bad, p)
		}
	}
	if tokens.Len() != 2 {
		t.Errorf("Len %d", tokens.Len())
	}
}

func TestRolesAllowWhatTheOnesBeforeThemDo(t *testing.T) {
	order := []access.Role{access.RoleReader, access.RoleWorker, access.RoleOperator}
	for i, r := range order {
		for j, need := range order {
			if got := r.Allows(need); got != (i >= j) {
				t.Errorf("%s allows %s: %v", r, need, got)
			}
		}
	}
	if access.Role("admin").Allows(access.RoleReader) {
		t.Error("an unknown role allows reading")
	}
}

func TestBadTokensFilesAreRefusedSayingWhere(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"principals:\n" + entry("x", "admin", "t"), `role "admin"`},
		{"principals:\n  - name: x\n    role: reader\n    token_sha256: abc\n", "64 hex digits"},
		{"principals:\n" + entry("", "reader", "t"), "a name of 1 to"},
		{"principals:\n" + entry("x", "reader", "t") + entry("x", "operator", "u"), "same name or token"},
		{"principals:\n" + entry("x", "reader", "t") + entry("y", "operator", "t"), "same name or token"},
		{"principals:\n  - name: x\n    role: reader\n    token: plain\n", "does not parse"},
	} {
		_, err := access.ParseTokens([]byte(c.file))
		if !errors.Is(err, runstate.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an invalid argument saying %q", c.file, err, c.want)
		}
	}
	if _, err := access.LoadTokens("/no/such/tokens.yaml"); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("a missing file: %v", err)
	}
}
