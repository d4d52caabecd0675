// Package access is the credential table that the gateway and the demo
// runner's console share: a tokens file of principals, each with a role and
// the SHA-256 of its token, and the roles' order.
package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/runstate/runstate"
)

// Role says what a principal may do.
type Role string

// Roles, each allowed what the one before it is, and more.
const (
	// RoleReader gets runs, lists them and reads their audit trails.
	RoleReader Role = "reader"
	// RoleWorker also creates runs, claims, renews and releases leases in
	// its own name (the lease owner's worker is the principal's name), and
	// writes runs under a lease (fenced writes).
	RoleWorker Role = "worker"
	// RoleOperator also writes without a lease (cancel, signal) and claims
	// in any name (crash recovery).
	RoleOperator Role = "operator"
)

func (r Role) rank() int {
	switch r {
	case RoleReader:
		return 1
	case RoleWorker:
		return 2
	case RoleOperator:
		return 3
	}
	return 0
}

// Allows reports whether r may do what need requires.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() }

// Principal is the authenticated holder of a token.
type Principal struct {
	Name string
	Role Role
}

// Tokens is the credential table: each principal with the SHA-256 of its
// token. The tokens themselves are never stored.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	principal Principal
	hash      [sha256.Size]byte
}

// tokensFile is the file an operator manages:
//
//	principals:
//	  - name: worker-a
//	    role: worker
//	    token_sha256: 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea
type tokensFile struct {
	Principals []struct {
		Name        string `yaml:"name"`
		Role        Role   `yaml:"role"`
		TokenSHA256 string `yaml:"token_sha256"`
	} `yaml:"principals"`
}

// HashToken returns what the tokens file keeps of token: its SHA-256, in hex.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// LoadTokens reads the tokens file at path.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, runstate.InvalidArgument("tokens", "cannot read the tokens file: %v", err)
	}
	t, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads a tokens file's content. Every principal needs a name
// (its worker id when it holds leases), a known role and a token hash; two
// principals share neither.
func ParseTokens(b []byte) (*Tokens, error) {
	var f tokensFile
	if err := yaml.UnmarshalWithOptions(b, &f, yaml.DisallowUnknownField()); err != nil {
		return nil, runstate.InvalidArgument("tokens", "the tokens file does not parse: %v", err)
	}
	t := &Tokens{}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i, p := range f.Principals {
		where := fmt.Sprintf("principal %d (%q)", i+1, p.Name)
		if strings.TrimSpace(p.Name) == "" || len(p.Name) > runstate.MaxOwnerLen {
			return nil, runstate.InvalidArgument("tokens", "%s: a name of 1 to %d bytes is required", where, runstate.MaxOwnerLen)
		}
		if p.Role.rank() == 0 {
			return nil, runstate.InvalidArgument("tokens", "%s: role %q is not reader, worker or operator", where, p.Role)
		}
		raw, err := hex.DecodeString(p.TokenSHA256)
		if err != nil || len(raw) != sha256.Size {
			return nil, runstate.InvalidArgument("tokens", "%s: token_sha256 must be 64 hex digits (runstate-gateway hash-token prints it)", where)
		}
		e := tokenEntry{principal: Principal{Name: p.Name, Role: p.Role}}
		copy(e.hash[:], raw)
		if names[p.Name] || hashes[e.hash] {
			return nil, runstate.InvalidArgument("tokens", "%s: another principal has the same name or token", where)
		}
		names[p.Name], hashes[e.hash] = true, true
		t.entries = append(t.entries, e)
	}
	return t, nil
}

// Authenticate returns the principal whose token this is. It compares the
// token's hash with every entry in constant time, so the answer's timing
// tells nothing about which entry, if any, came close.
func (t *Tokens) Authenticate(token string) (Principal, bool) {
	h := sha256.Sum256([]byte(token))
	var found Principal
	match := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			found, match = e.principal, 1
		}
	}
	return found, match == 1 && token != ""
}

// Len is the number of principals.
func (t *Tokens) Len() int { return len(t.entries) }
