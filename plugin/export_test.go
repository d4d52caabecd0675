package plugin

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
