package workflow

import "github.com/runstate/runstate/internal/procfs"

// groupHasLiving reports whether a process of the group pgid runs or
// sleeps: a zombie has run its last instruction and does not count.
func groupHasLiving(pgid int) bool {
	live, _ := procfs.LiveMembers(pgid)
	return len(live) > 0
}
