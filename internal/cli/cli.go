// Package cli holds what runstate's commands share: running a command with
// signal handling and typed exit codes, and flag types.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// ExitError ends a command with Code, printing Msg (when set) on stderr.
type ExitError struct {
	Code int
	Msg  string
}

func (e ExitError) Error() string { return fmt.Sprintf("exit %d: %s", e.Code, e.Msg) }

// Errorf returns an ExitError with a formatted message.
func Errorf(code int, format string, args ...any) error {
	return ExitError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Main runs a command's run function with a context that SIGINT, SIGTERM
// and SIGHUP cancel (a closed terminal stops a worker as gracefully as
// Ctrl-C, instead of killing it with its run left running), and exits with the ExitError's code, or with failure for
// any other error.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error, failure int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var exit ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		if exit.Msg != "" {
			fmt.Fprintln(os.Stderr, name+":", exit.Msg)
		}
		os.Exit(exit.Code)
	default:
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(failure)
	}
}

// Parse parses args into fs: a request for help ends the command with
// helpCode (after fs printed its usage), any other error with usageCode.
func Parse(fs *flag.FlagSet, args []string, helpCode, usageCode int) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return ExitError{Code: helpCode}
	}
	return ExitError{Code: usageCode}
}

// KVFlag collects repeated key=value flags.
type KVFlag map[string]string

func (k KVFlag) String() string {
	if len(k) == 0 {
		return ""
	}
	return fmt.Sprint(map[string]string(k))
}

// AddFile adds the key=value lines of the file at path (blank lines and
// lines starting with # are skipped) where k has no value for the key yet:
// secrets given in a file stay out of the process list, and a flag on the
// command line still wins.
func (k KVFlag) AddFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(key) == "" {
			return fmt.Errorf("%s:%d: want key=value", path, i+1) // the line may be a secret: not repeated
		}
		if _, set := k[strings.TrimSpace(key)]; !set {
			k[strings.TrimSpace(key)] = val
		}
	}
	return nil
}

// Type names the value in help texts.
func (k KVFlag) Type() string { return "key=value" }

// Set adds one key=value.
func (k KVFlag) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(key) == "" {
		return fmt.Errorf("%q is not key=value", v)
	}
	k[strings.TrimSpace(key)] = val
	return nil
}
