//go:build !linux

package workflow

import "syscall"

// groupHasLiving reports whether a process of the group pgid is left
// (zombies included, which this system cannot tell apart).
func groupHasLiving(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
