package plugin

import (
	"context"

	pb "github.com/runstate/runstate/plugin/proto"
)

// RawGetRun calls GetRun on the plugin's gRPC client directly, without the
// client's conversions or the host's validation, for the benchmark that
// splits the plugin's cost.
func (c *Client) RawGetRun(ctx context.Context, runID string) error {
	_, err := c.cur.rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	return err
}
