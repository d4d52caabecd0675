package plugin

import (
	"context"

	pb "github.com/runstate/runstate/plugin/proto"
)

// PID is the plugin process's id (0 for an in-process connection), for
// tests that signal it.
func (c *Client) PID() int {
	if c.proc == nil {
		return 0
	}
	if rc := c.proc.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// RawGetRun calls GetRun on the plugin's gRPC client directly, without the
// client's conversions or the host's validation, for the benchmark that
// splits the plugin's cost.
func (c *Client) RawGetRun(ctx context.Context, runID string) error {
	_, err := c.rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	return err
}
