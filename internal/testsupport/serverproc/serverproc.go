// Package serverproc runs a database server of one test's own as a child
// process: in a process group of its own, killed whole with SIGKILL as a
// crash would kill it, and started again on the same data. The MySQL and
// PostgreSQL test packages build their private servers on it.
package serverproc

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
	"testing"
	"time"
)

// Server is a server process that can be killed and started again.
type Server struct {
	// Command makes the command that runs the server in the foreground.
	Command func() *exec.Cmd
	// Ready reports whether the server answers.
	Ready func(ctx context.Context) error
	// Log is the server's log file, quoted when it fails to start.
	Log string
	// RunAs, when set, runs the server as another user (PostgreSQL
	// refuses to run as root); Linux only.
	RunAs *User

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// User is a user to run a server as.
type User struct{ Uid, Gid uint32 }

// Start starts the server and returns once Ready says it answers.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("the server is running already")
	}
	cmd := s.Command()
	if err := ownGroup(cmd, s.RunAs); err != nil {
		return err
	}
	// What a server prints before its own log is open: PostgreSQL's
	// logging collector starts after the checks that may refuse to start.
	early := &headBuffer{}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		cmd.Stdout, cmd.Stderr = early, early
		cmd.WaitDelay = time.Second // a process outside the group holding the output ends no wait
	}
	if err := start(cmd); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if err := s.Ready(ctx); err == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting (%v), saying: %s; its log %s ends: %s", cmd.Path, cmd.ProcessState, early.String(), s.Log, TailFile(s.Log))
		case <-ctx.Done():
			killGroup(cmd, done)
			return fmt.Errorf("%s did not answer within a minute; its log %s ends: %s", cmd.Path, s.Log, TailFile(s.Log))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Run runs Command to its end (a set-up step, such as initdb), as RunAs,
// and returns its output.
func (s *Server) Run() ([]byte, error) {
	cmd := s.Command()
	if err := ownGroup(cmd, s.RunAs); err != nil {
		return nil, err
	}
	return cmd.CombinedOutput()
}

// Kill ends the server and every process it started with SIGKILL and
// waits until they are gone. Killing a stopped server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	err := killGroup(s.cmd, s.done)
	s.cmd, s.done = nil, nil
	return err
}

// Running reports whether the server was started and not killed since.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Lookup finds the first of names on PATH or in dirs.
func Lookup(names []string, dirs ...string) (string, error) {
	for _, n := range names {
		if path, err := exec.LookPath(n); err == nil {
			return path, nil
		}
		for _, dir := range dirs {
			if path := filepath.Join(dir, n); isExecutable(path) {
				return path, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v found on PATH or in %v", names, dirs)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// OnFreePorts calls start with n ports found free, and when it fails,
// again with others, up to three times: another process may take a port
// found free before the server binds it (packages' tests run side by side).
func OnFreePorts[T any](n int, start func(ports []string) (T, error)) (T, error) {
	var errs []error
	for range 3 {
		ports := make([]string, n)
		for i := range ports {
			port, err := FreePort()
			if err != nil {
				var zero T
				return zero, err
			}
			ports[i] = port
		}
		v, err := start(ports)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err)
	}
	var zero T
	return zero, errors.Join(errs...)
}

// Require returns what start made, or ends the test: skipped, or failed
// under CI=true, which must never pass a test it did not run. what names
// the server, install the package that provides it.
func Require[T any](t testing.TB, what, install string, start func() (T, error)) T {
	t.Helper()
	v, err := start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no private %s server for this test (CI=true forbids skipping): %v", what, err)
		}
		t.Skipf("SKIPPING: cannot start a private %s server: %v (install %s)", what, err, install)
	}
	return v
}

// Tail is the end of a command's output, for an error message.
func Tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// TailFile is the end of a log file.
func TailFile(path string) string {
	b, _ := os.ReadFile(path)
	return Tail(b)
}

// headBuffer keeps the first 4 kB written to it: a server's output before
// its own log is open, and nothing of a long life after that.
type headBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := 4096 - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.buf)
}
