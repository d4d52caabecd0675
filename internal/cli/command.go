package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runstate/runstate/internal/buildinfo"
)

// Execute runs root with args the way runstate's commands behave: flags
// and arguments mix in any order, --help prints the command's help and
// succeeds, and anything wrong with the command line (an unknown command
// or flag, a bad flag value, a wrong number of arguments) ends with
// usageCode and a message naming the --help to read. Errors the commands
// return pass through unchanged.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer, usageCode int) error {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage(c, usageCode, err.Error())
	})
	// Errors from the command line are cobra's own and come before any
	// command ran: running marks the boundary.
	running := false
	wrapRuns(root, &running)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || running {
		return err
	}
	var exit ExitError
	if errors.As(err, &exit) {
		return err
	}
	return usage(cmd, usageCode, err.Error())
}

// wrapRuns marks, for every command in the tree, the moment it starts to
// run, after cobra has parsed and checked its command line.
func wrapRuns(c *cobra.Command, running *bool) {
	if c.RunE != nil {
		inner := c.RunE
		c.RunE = func(c *cobra.Command, args []string) error {
			*running = true
			return inner(c, args)
		}
	}
	for _, sub := range c.Commands() {
		wrapRuns(sub, running)
	}
}

func usage(c *cobra.Command, code int, msg string) error {
	if c == nil {
		return ExitError{Code: code, Msg: msg}
	}
	return ExitError{Code: code, Msg: fmt.Sprintf("%s (%s --help)", msg, c.CommandPath())}
}

// ExactArgs accepts exactly the named positional arguments, and says which
// are missing or extra in a way a person can act on.
func ExactArgs(names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return fmt.Errorf("%s needs %s", c.Name(), strings.Join(names[len(args):], " "))
		case len(args) > len(names):
			extra := args[len(names)]
			if strings.HasPrefix(extra, "-") {
				return fmt.Errorf("unexpected argument %q: flags need their value in the same word or the next one", extra)
			}
			if len(names) == 0 {
				return fmt.Errorf("%s takes no arguments, got %q", c.Name(), extra)
			}
			return fmt.Errorf("%s takes one %s, got another: %q", c.Name(), names[len(names)-1], extra)
		}
		return nil
	}
}

// VersionCommand is the version subcommand of the command root: it prints
// the kit's version, the protocol's, and the features the protocol knows
// (buildinfo.Versions), as text or, with --format json, as JSON.
func VersionCommand(root string) *cobra.Command {
	format := "text"
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the kit's version, the protocol's version and the protocol's features",
		Long: `version prints which build this is: the kit's version (a release, or "devel" and the commit it
was built from, "+dirty" when the checkout was modified), the version of the wire protocol it
speaks to plugins and gateways (MAJOR.MINOR), and the features that protocol knows, which a
plugin or gateway of it may announce. Text prints a "key: value" line each; --format json one
object (kit_version, protocol_version, features).`,
		Example: "  " + root + " version\n  " + root + " version --format json",
		Args:    ExactArgs(),
		PreRunE: func(*cobra.Command, []string) error { return buildinfo.CheckFormat(format) },
		RunE: func(c *cobra.Command, _ []string) error {
			return buildinfo.Current().Write(c.OutOrStdout(), format)
		},
	}
	cmd.Flags().StringVar(&format, "format", format, "stdout format: text or json")
	cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
