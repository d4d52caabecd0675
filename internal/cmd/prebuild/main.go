// Command prebuild builds, once per machine, what the tests take as
// inputs rather than prove: the commands of the earlier releases that the
// compatibility matrix meets (internal/compat), into the user's cache
// directory, kept by commit. .ci/run runs it beside the installs of a new
// machine, so that the matrix's test does not build them in its own time;
// the test builds whatever is missing itself.
//
//	go run ./internal/cmd/prebuild
//
// Exit codes: 0 every release is built (now or before), 1 one could not
// be (the message says which and why: a shallow clone lacks the commits).
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/runstate/runstate/internal/cli"
	"github.com/runstate/runstate/internal/compat"
)

func main() {
	cli.Main("prebuild", run, 1)
}

func run(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) > 0 {
		return cli.Errorf(2, "usage: prebuild (no arguments)")
	}
	dirs, err := compat.BuildEarlierReleases()
	for _, name := range slices.Sorted(maps.Keys(dirs)) {
		fmt.Fprintf(stdout, "prebuild: release %s in %s\n", name, dirs[name])
	}
	return err
}
