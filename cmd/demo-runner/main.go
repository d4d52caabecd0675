// Command demo-runner runs workflow files on any runstate store: in the
// foreground, or queued and taken by workers under leases; with crash
// recovery where a process takes runs on, webhooks, and an HTTP API.
//
// Exit codes: 0 success, 1 the run did not succeed, 2 usage error,
// 3 the store or the environment failed.
package main

import (
	"os"

	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/internal/cli"
)

func main() {
	// Each step command runs under this same binary as its supervisor.
	if len(os.Args) > 1 && os.Args[1] == workflow.SupervisorArg {
		os.Exit(workflow.Supervise(os.Args[2:]))
	}
	cli.Main("demo-runner", run, exitFailure)
}
