// Command testcpu runs a test binary for go test -exec and records the CPU
// time its process tree spends (the binary, and the plugins, gateways,
// servers and workers it starts), so that make test can say what each
// package and each test cost, not only how long it took:
//
//	go test -exec testcpu ./...        (RUNSTATE_TEST_CPU=FILE)
//
// At the start, and then every two seconds, it appends to FILE a JSON line
// with the package's import path, the binary's pid, the time and the
// tree's CPU seconds so far (reading /proc costs about a millisecond per
// hundred processes); the last line, once
// the binary has exited, has "final": true and the CPU of every
// descendant the binary waited for. internal/cmd/testreport reads the
// lines beside go test's JSON output. Without RUNSTATE_TEST_CPU it only
// runs the binary. Its exit status is the binary's; signals go test sends
// (a timeout's SIGQUIT, an interrupt) are passed on.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runstate/runstate/internal/procfs"
)

// Sample is one line of the file.
type Sample struct {
	Package string `json:"package"`
	// PID tells apart two binaries of one package that run at once (make
	// test runs a package's race-detected tests and its others as two).
	PID   int     `json:"pid"`
	Time  int64   `json:"t_ms"` // Unix milliseconds
	CPU   float64 `json:"cpu_s"`
	Final bool    `json:"final,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testcpu TEST-BINARY [ARGS...] (as go test -exec runs it)")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1], os.Args[2:], os.Getenv("RUNSTATE_TEST_CPU")))
}

func run(binary string, args []string, out string) int {
	cmd := exec.Command(binary, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testcpu: %v\n", err)
		return 2
	}
	go func() {
		for s := range signals {
			cmd.Process.Signal(s)
		}
	}()
	var rec *recorder
	if out != "" {
		rec = newRecorder(out, cmd.Process.Pid)
	}
	err := cmd.Wait()
	if rec != nil {
		rec.finish(cmd.ProcessState)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "testcpu: %v\n", err)
		return 2
	}
}

const samplePeriod = 2 * time.Second

// recorder samples the tree under one pid until finish.
type recorder struct {
	pkg  string
	pid  int
	file *os.File
	stop chan struct{}
	done sync.WaitGroup
	mu   sync.Mutex
	last float64
}

func newRecorder(out string, pid int) *recorder {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testcpu: %v (CPU not recorded)\n", err)
		return nil
	}
	r := &recorder{pkg: packageOfDir(), pid: pid, file: f, stop: make(chan struct{})}
	r.write(Sample{Time: time.Now().UnixMilli()}) // where the first interval starts
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-tick.C:
				if cpu, ok := treeCPU(r.pid); ok {
					r.write(Sample{Time: time.Now().UnixMilli(), CPU: cpu})
				}
			}
		}
	}()
	return r
}

// finish writes the final line: the binary's own CPU and that of every
// descendant it waited for, or the last sample's when that is more (a
// descendant that outlived the binary, or one nobody reaped).
func (r *recorder) finish(state *os.ProcessState) {
	close(r.stop)
	r.done.Wait()
	cpu := (state.UserTime() + state.SystemTime()).Seconds()
	if ru, ok := state.SysUsage().(*syscall.Rusage); ok {
		// The binary's own, and its reaped children's, as wait4 gives it.
		cpu = rusageSeconds(ru)
	}
	r.write(Sample{Time: time.Now().UnixMilli(), CPU: max(cpu, r.last), Final: true})
	r.file.Close()
}

func rusageSeconds(ru *syscall.Rusage) float64 {
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func (r *recorder) write(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Package, s.PID = r.pkg, r.pid
	r.last = max(r.last, s.CPU)
	b, _ := json.Marshal(s)
	r.file.Write(append(b, '\n')) // one write per line: lines of packages run at once do not mix
}

// treeCPU sums the CPU of pid and its descendants, each with the CPU of
// the children it has reaped, so that a child's time counts once whether
// it is alive, a zombie, or reaped.
func treeCPU(pid int) (float64, bool) {
	ps, err := procfs.List()
	if err != nil {
		return 0, false
	}
	children := map[int][]procfs.Process{}
	var root *procfs.Process
	for i, p := range ps {
		children[p.PPID] = append(children[p.PPID], p)
		if p.PID == pid {
			root = &ps[i]
		}
	}
	if root == nil {
		return 0, false
	}
	var sum time.Duration
	var walk func(p procfs.Process)
	walk = func(p procfs.Process) {
		sum += p.CPU + p.ReapedChildrenCPU
		for _, c := range children[p.PID] {
			walk(c)
		}
	}
	walk(*root)
	return sum.Seconds(), true
}

// packageOfDir is the import path of the package go test runs the binary
// in: it starts it in the package's directory.
func packageOfDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for root := dir; ; {
		if mod, ok := modulePath(filepath.Join(root, "go.mod")); ok {
			rel, err := filepath.Rel(root, dir)
			if err != nil || rel == "." {
				return mod
			}
			return path.Join(mod, filepath.ToSlash(rel))
		}
		parent := filepath.Dir(root)
		if parent == root {
			return dir
		}
		root = parent
	}
}

func modulePath(gomod string) (string, bool) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), true
		}
	}
	return "", false
}
