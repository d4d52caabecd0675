package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// Private is a server of one test's own: its data directory in the test's
// temporary directory and a port of its own, so that the test can kill it
// (Kill: SIGKILL, as a crash) and start it again (Start) without touching
// the server other tests share.
type Private struct {
	*serverproc.Server
	// Scratch makes scratch databases on it (root, no password).
	Scratch *scratch.Server
}

// StartPrivate initialises a data directory and starts a MariaDB (or
// MySQL) server on it. It needs the server's binaries on this machine:
// without them the test is skipped, except under CI=true, where it fails.
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	p := serverproc.Require(t, "MySQL", "mariadb-server", func() (*Private, error) { return startPrivate(t.TempDir()) })
	t.Cleanup(func() { p.Kill() })
	return p
}

var sbin = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"}

func startPrivate(dir string) (*Private, error) {
	daemon, err := serverproc.Lookup([]string{"mariadbd", "mysqld"}, sbin...)
	if err != nil {
		return nil, err
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "root"
	}
	data := filepath.Join(dir, "data")
	initialise := exec.Command(daemon, "--no-defaults", "--initialize-insecure", "--datadir="+data, "--user="+user)
	if filepath.Base(daemon) == "mariadbd" {
		install, err := serverproc.Lookup([]string{"mariadb-install-db", "mysql_install_db"}, sbin...)
		if err != nil {
			return nil, err
		}
		initialise = exec.Command(install, "--no-defaults", "--datadir="+data, "--user="+user, "--skip-test-db",
			"--auth-root-authentication-method=normal")
	}
	if out, err := initialise.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", initialise, err, serverproc.Tail(out))
	}
	port, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	srv, err := scratch.FromDSNUnchecked("root@tcp(127.0.0.1:"+port+")/", "private")
	if err != nil {
		return nil, err
	}
	log := filepath.Join(dir, "server.log")
	p := &Private{Scratch: srv, Server: &serverproc.Server{Log: log, Ready: srv.Ping, Command: func() *exec.Cmd {
		return exec.Command(daemon, "--no-defaults", "--datadir="+data, "--socket="+filepath.Join(dir, "sock"), "--port="+port,
			"--bind-address=127.0.0.1", "--user="+user, "--skip-grant-tables", "--skip-name-resolve",
			"--pid-file="+filepath.Join(dir, "server.pid"), "--log-error="+log, "--innodb-buffer-pool-size=32M")
	}}}
	return p, p.Start(context.Background())
}
