//go:build !linux

package main

import (
	"context"
	"os/exec"
	"syscall"
)

// family: outside Linux this process adopts no orphans; what a test run
// leaves behind lives on.
type family struct{}

func adopt(context.Context) (*family, error) { return &family{}, nil }

func (*family) start(cmd *exec.Cmd) error { return cmd.Start() }

func (*family) wait(cmd *exec.Cmd) error { return cmd.Wait() }

func (*family) endOrphans() {}

func burnerAttrs() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
