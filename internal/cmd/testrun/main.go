// Command testrun runs several go test -json commands side by side and
// merges what they print into one stream, a whole line at a time, for
// gotestsum's --raw-command: make test runs the tests that need the race
// detector and those that do not as two go test commands, since one
// command builds every package one way.
//
//	testrun 'go test -json -race ./a/...' 'go test -json ./b/...'
//
// Each argument is a command for sh -c. Standard error passes through.
// The exit status is the first failing command's, or 0 when all pass;
// an interrupt reaches every command (they share the process group).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testrun 'COMMAND' ['COMMAND'...]")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(commands []string, stdout, stderr io.Writer) int {
	var mu sync.Mutex // one line at a time on stdout
	if _, ok := stderr.(*os.File); !ok {
		// A file goes to the commands as it is; any other writer is
		// written by a goroutine per command, one at a time.
		stderr = &lockedWriter{w: stderr}
	}
	codes := make([]int, len(commands))
	var wg sync.WaitGroup
	for i, c := range commands {
		cmd := exec.Command("sh", "-c", c)
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintf(stderr, "testrun: %s: %v\n", c, err)
			codes[i] = 2
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := bufio.NewReaderSize(out, 64<<10)
			for {
				line, err := r.ReadBytes('\n')
				if len(line) > 0 {
					if line[len(line)-1] != '\n' {
						line = append(line, '\n') // a last line without one would run into another command's
					}
					mu.Lock()
					stdout.Write(line)
					mu.Unlock()
				}
				if err != nil {
					break
				}
			}
			var exit *exec.ExitError
			switch err := cmd.Wait(); {
			case err == nil:
			case errors.As(err, &exit) && exit.ExitCode() > 0:
				codes[i] = exit.ExitCode()
			default:
				fmt.Fprintf(stderr, "testrun: %s: %v\n", c, err)
				codes[i] = 2
			}
		}()
	}
	wg.Wait()
	for _, code := range codes {
		if code != 0 {
			return code
		}
	}
	return 0
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
