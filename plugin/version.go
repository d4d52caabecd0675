package plugin

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/runstate/runstate/internal/buildinfo"
)

// versionArgs are the first arguments that ask a plugin binary for its
// version; a host starts it with none.
var versionArgs = []string{"--version", "-version", "version"}

// answerVersion answers a command line that asks for the version
// (versionArgs, then --format text or json): it prints the kit's and the
// protocol's versions, the store's name and version, and the protocol's
// features, and returns the exit code (0, or 2 for a command line it
// cannot read). asked is false for any other command line.
func answerVersion(args []string, cfg serveConfig, stdout, stderr io.Writer) (code int, asked bool) {
	if len(args) == 0 || !slices.Contains(versionArgs, args[0]) {
		return 0, false
	}
	const usage = 2
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "text", "output format: text or json")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return usage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s takes no arguments, got %q\n", args[0], fs.Arg(0))
		return usage, true
	}
	v := buildinfo.Current()
	v.Plugin, v.PluginVersion = cfg.name, cfg.version
	if err := v.Write(stdout, *format); err != nil {
		fmt.Fprintln(stderr, err)
		return usage, true
	}
	return 0, true
}
