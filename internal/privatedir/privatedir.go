// Package privatedir makes directories that only the current user may use,
// for sockets and lock files under a shared temporary directory, where
// another user could have made the directory first.
package privatedir

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Ensure makes dir (and missing parents, 0700) or checks the one that is
// there: a real directory, not a link, owned by this user, that nobody else
// may write to or enter. Anything else is an error naming what is wrong.
func Ensure(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory of its own (a link, or a file): refusing to use it", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s belongs to user %d, not to this user (%d): refusing to use it", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s has mode %v: other users may use it; make it 0700 or remove it", dir, fi.Mode().Perm())
	}
	return nil
}

// UnderTemp returns a private directory for this user under the system's
// temporary directory (or $XDG_RUNTIME_DIR, which is private already),
// joined with elem, made or checked by Ensure.
func UnderTemp(elem ...string) (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("runstate-%d", os.Getuid()))
		if err := Ensure(base); err != nil {
			return "", err
		}
	} else {
		base = filepath.Join(base, "runstate")
	}
	dir := filepath.Join(append([]string{base}, elem...)...)
	if err := Ensure(dir); err != nil {
		return "", err
	}
	return dir, nil
}
