package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/stores"
)

// completeFlags offers the values a flag can take to shell completion
// (demo-runner completion bash|zsh|fish|powershell).
func completeFlags(root *cobra.Command, byName map[string]*cobra.Command) {
	fixed := func(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return values, cobra.ShellCompDirectiveNoFileComp
		}
	}
	root.RegisterFlagCompletionFunc("store", func(_ *cobra.Command, _ []string, typed string) ([]string, cobra.ShellCompDirective) {
		var kinds []string
		for _, s := range stores.Schemes() {
			if s.Arg == "" {
				kinds = append(kinds, s.Name)
			} else {
				kinds = append(kinds, s.Name+":")
			}
		}
		if name := stores.Parse(typed); strings.Contains(typed, ":") && (name.Scheme == "badger" || name.Scheme == "plugin") {
			return nil, cobra.ShellCompDirectiveDefault // a path follows
		}
		return kinds, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	})
	root.RegisterFlagCompletionFunc("recovery", fixed(string(runstate.RecoverInterrupt), string(runstate.RecoverFail), string(runstate.RecoverTakeover)))
	root.RegisterFlagCompletionFunc("log-level", fixed("debug", "info", "warn", "error"))
	for _, name := range []string{"run", "submit"} {
		byName[name].ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
		}
	}
	statuses := []string{}
	for _, s := range runstate.RunStatuses() {
		statuses = append(statuses, string(s))
	}
	byName["list"].RegisterFlagCompletionFunc("status", fixed(statuses...))
	byName["worker"].RegisterFlagCompletionFunc("statuses", fixed(string(runstate.StatusQueued), string(runstate.StatusWaiting), string(runstate.StatusRunning)))
}
