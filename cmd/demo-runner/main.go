// Command demo-runner runs workflow files on any runstate store: in the
// foreground, or queued and taken by workers under leases; with crash
// recovery at every start, webhooks, and an HTTP API.
//
// Exit codes: 0 success, 1 the run did not succeed, 2 usage error,
// 3 the store or the environment failed.
package main

import "github.com/runstate/runstate/internal/cli"

func main() { cli.Main("demo-runner", run, exitFailure) }
