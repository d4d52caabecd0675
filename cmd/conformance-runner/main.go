// Command conformance-runner certifies a runstate store against the
// contract of docs/spec.md and reports the verdict per rule.
//
// Exit codes: 0 every selected rule passed (skips allowed), 1 a rule failed,
// 2 usage error or a store that holds runs, 3 the harness broke.
package main

import "github.com/runstate/runstate/internal/cli"

func main() { cli.Main("conformance-runner", run, exitHarness) }
