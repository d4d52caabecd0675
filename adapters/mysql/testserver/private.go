package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate/adapters/mysql/scratch"
)

// Private is a server of one test's own: its data directory in the test's
// temporary directory and a port of its own, so that the test can kill it
// and start it again without touching the server other tests share.
type Private struct {
	// Server makes scratch databases on it (root, no password).
	*scratch.Server
	daemon  string
	args    []string
	logPath string

	mu  sync.Mutex
	cmd *exec.Cmd
	out chan error // the running server's exit
}

// StartPrivate initialises a data directory and starts a MariaDB (or
// MySQL) server on it. It needs the server's binaries on this machine:
// without them the test is skipped, except under CI=true, where it fails.
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	p, err := startPrivate(t.TempDir())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no private MySQL server for this test (CI=true forbids skipping): %v", err)
		}
		t.Skipf("SKIPPING: cannot start a private MySQL server: %v (install mariadb-server)", err)
	}
	t.Cleanup(func() { p.Kill() })
	return p
}

// lookup finds the first of names on PATH or in the sbin directories.
func lookup(names ...string) (string, error) {
	for _, n := range names {
		if path, err := exec.LookPath(n); err == nil {
			return path, nil
		}
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"} {
			if path := filepath.Join(dir, n); isExecutable(path) {
				return path, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v found", names)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func startPrivate(dir string) (*Private, error) {
	daemon, err := lookup("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	var initialise *exec.Cmd
	if install, err := lookup("mariadb-install-db", "mysql_install_db"); err == nil && filepath.Base(daemon) == "mariadbd" {
		initialise = exec.Command(install, "--no-defaults", "--datadir="+data, "--user="+currentUser(), "--skip-test-db",
			"--auth-root-authentication-method=normal")
	} else {
		initialise = exec.Command(daemon, "--no-defaults", "--initialize-insecure", "--datadir="+data, "--user="+currentUser())
	}
	if out, err := initialise.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", initialise, err, tail(out))
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &Private{daemon: daemon, logPath: filepath.Join(dir, "server.log"), args: []string{
		"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "sock"), "--port=" + port,
		"--bind-address=127.0.0.1", "--user=" + currentUser(), "--skip-grant-tables", "--skip-name-resolve",
		"--pid-file=" + filepath.Join(dir, "server.pid"), "--log-error=" + filepath.Join(dir, "server.log"),
		"--innodb-buffer-pool-size=32M",
	}}
	if p.Server, err = scratch.FromDSNUnchecked("root@tcp(127.0.0.1:"+port+")/", "private"); err != nil {
		return nil, err
	}
	if err := p.Start(context.Background()); err != nil {
		return nil, err
	}
	return p, nil
}

// Start starts the server on its data directory (after Kill, as after a
// crash: InnoDB recovers what was committed) and returns once it answers.
func (p *Private) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return errors.New("the private server is running already")
	}
	cmd := exec.Command(p.daemon, p.args...)
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	out := make(chan error, 1)
	go func() { out <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if err := p.Server.Ping(ctx); err == nil {
			p.cmd, p.out = cmd, out
			return nil
		}
		select {
		case err := <-out:
			return fmt.Errorf("the private server exited while starting: %v; its log %s ends: %s", err, p.logPath, tailFile(p.logPath))
		case <-ctx.Done():
			cmd.Process.Kill()
			<-out
			return fmt.Errorf("the private server did not answer within 60s; its log %s ends: %s", p.logPath, tailFile(p.logPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it
// to be gone. Killing a stopped server does nothing.
func (p *Private) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	err := p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.out
	p.cmd, p.out = nil, nil
	return err
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "root"
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	return tail(b)
}
