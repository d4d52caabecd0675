//go:build !unix

package plugin

import "os/exec"

func ownProcessGroup(*exec.Cmd) {}

func endProcessGroup(cmd *exec.Cmd) { cmd.Process.Kill() }
