package testserver

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill the server when the test process dies,
// so that a crashed test leaves no server behind.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
