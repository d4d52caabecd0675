package plugin

import (
	"context"

	"github.com/runstate/runstate/protocol/pb"
)

// RawGetRun calls GetRun on the plugin's gRPC client directly, without the
// client's conversions or the host's validation, for the benchmark that
// splits the plugin's cost.
func (c *Client) RawGetRun(ctx context.Context, runID string) error {
	s, err := c.sup.current()
	if err != nil {
		return err
	}
	_, err = s.rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	return err
}
