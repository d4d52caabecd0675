//go:build !linux

package main

import "syscall"

func adoptOrphans() error { return nil }

func endOrphans(map[int]bool) {}

func burnerAttrs() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
