package gateway

import "github.com/runstate/runstate/internal/access"

// The credential table lives in internal/access, which the demo runner's
// console shares; these names keep the gateway's API as it was.
type (
	// Role says what a principal may do through the gateway.
	Role = access.Role
	// Principal is the authenticated holder of a token.
	Principal = access.Principal
	// Tokens is the credential table: each principal with the SHA-256 of
	// its token. The tokens themselves are never stored.
	Tokens = access.Tokens
)

// Roles, each allowed what the one before it is, and more.
const (
	RoleReader   = access.RoleReader
	RoleWorker   = access.RoleWorker
	RoleOperator = access.RoleOperator
)

// HashToken returns what the tokens file keeps of token: its SHA-256, in hex.
func HashToken(token string) string { return access.HashToken(token) }

// LoadTokens reads the tokens file at path (the format is in docs/gateway.md).
func LoadTokens(path string) (*Tokens, error) { return access.LoadTokens(path) }

// ParseTokens reads a tokens file's content.
func ParseTokens(b []byte) (*Tokens, error) { return access.ParseTokens(b) }
