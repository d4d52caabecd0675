package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// Private is a server of one test's own: its data directory in a
// temporary directory and a port of its own, so that the test can kill it
// (Kill: SIGKILL to the postmaster and its backends, as a crash) and start
// it again (Start) without touching the server other tests share.
type Private struct {
	*serverproc.Server
	// Scratch makes scratch schemas in its database postgres (user
	// postgres, trust authentication on 127.0.0.1).
	Scratch *scratch.Server
}

// StartPrivate initialises a cluster with initdb and starts postgres on
// it. It needs PostgreSQL's binaries on this machine (and, run as root,
// the user postgres: PostgreSQL refuses to run as root): without them the
// test is skipped, except under CI=true, where it fails.
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	p := serverproc.Require(t, "PostgreSQL", "postgresql", func() (*Private, error) {
		// A directory of its own, not the test's: the server's user must reach it.
		dir, err := os.MkdirTemp("", "runstate-private-postgres-*")
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return startPrivate(dir)
	})
	t.Cleanup(func() { p.Kill() })
	return p
}

func startPrivate(dir string) (*Private, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	initdb, err := serverproc.Lookup([]string{"initdb"}, bins...)
	if err != nil {
		return nil, err
	}
	postgres := filepath.Join(filepath.Dir(initdb), "postgres")
	runAs, err := serverUser(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initialise := serverproc.Server{RunAs: runAs, Command: func() *exec.Cmd {
		return exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	}}
	if out, err := initialise.Run(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, serverproc.Tail(out))
	}
	port, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	srv, err := scratch.FromDSNUnchecked("postgres://postgres@127.0.0.1:"+port+"/postgres?sslmode=disable", "private")
	if err != nil {
		return nil, err
	}
	p := &Private{Scratch: srv, Server: &serverproc.Server{RunAs: runAs, Log: filepath.Join(data, "log", "server.log"), Ready: srv.Ping,
		Command: func() *exec.Cmd {
			return exec.Command(postgres, "-D", data, "-p", port, "-k", dir, "-c", "listen_addresses=127.0.0.1",
				"-c", "logging_collector=on", "-c", "log_directory=log", "-c", "log_filename=server.log")
		}}}
	return p, p.Start(context.Background())
}

// serverUser returns whom to run PostgreSQL as: nil for this user, or, for
// root, the user postgres, who is given dir.
func serverUser(dir string) (*serverproc.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL does not run as root, and there is no user postgres to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &serverproc.User{Uid: uint32(uid), Gid: uint32(gid)}, os.Chown(dir, uid, gid)
}
