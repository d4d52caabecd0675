package badgershare

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runstate/runstate"
)

// Whatever the length of the directory's path, the holder can serve it:
// the socket's path, and the longer one it is first bound at, fit a unix
// socket. A directory whose socket path alone would fit, but not the
// staging path, once made the holder serve nobody, and every other
// process fail after waiting for it.
func TestTheHolderServesADirectoryOfAnyPathLength(t *testing.T) {
	base := t.TempDir()
	for n := len(base) + 2; n < 130; n += 3 {
		dir := filepath.Join(base, strings.Repeat("d", n-len(base)-1))
		sock, err := SocketPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(filepath.Dir(sock))+len(stagingSuffix) >= maxSocketPath {
			t.Fatalf("a directory of %d bytes: socket %s (%d bytes) is bound at a path over %d bytes", len(dir), sock, len(sock), maxSocketPath)
		}
	}
	// A store whose socket path fits but whose staging path would not
	// (the tests' own directories are named so), served for real: another
	// Open reaches the store through the socket.
	dir := filepath.Join(base, strings.Repeat("p", 85-len(base)), "store")
	if sock := dir + ".sock"; len(sock) >= maxSocketPath || len(filepath.Dir(sock))+len(stagingSuffix) < 108 {
		t.Fatalf("the case is not the one meant: %s", sock)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	holder, err := Open(ctx, Options{Dir: dir, Serve: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := Open(ctx, Options{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("a second process's open: %v", err)
	}
	defer other.Close()
	if _, err := other.ListRuns(ctx, runstate.ListRunsParams{}); err != nil {
		t.Fatalf("a call through the socket: %v", err)
	}
}
