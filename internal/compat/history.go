package compat

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/runstate/runstate/internal/testsupport/gocmd"
	"github.com/runstate/runstate/plugin/plugintest"
	"github.com/runstate/runstate/protocol"
)

// A release is a version of runstate the matrix meets: a commit of this
// repository's history, or the working tree.
type release struct {
	name     string // as the matrix names it
	commit   string // full hash; empty for the working tree
	protocol string // the plugin protocol it speaks, for the matrix's table
}

// The releases the matrix meets: today's working tree; the last commit
// before protocol 1.7, which keeps every field but names neither its
// version nor its features; and a plugin protocol without batches,
// release_lease, principals, watches or a test clock.
var (
	today     = release{name: "today", protocol: protocol.Version}
	release16 = release{name: "b2bef89", commit: "b2bef898c9dffb1cd23ffcb7c833e05b70fdd5b1", protocol: "1.6"}
	release10 = release{name: "9a852de", commit: "9a852deec8e1ef93bb777d4939d23bbe760ae72a", protocol: "1.0"}
	releases  = []release{today, release16, release10}
)

// The commands the matrix builds of every release.
const (
	runnerCmd        = "conformance-runner"
	memoryPluginCmd  = "runstate-plugin-memory"
	badgerPluginCmd  = "runstate-plugin-badger"
	gatewayCmd       = "runstate-gateway"
	modulePath       = "github.com/runstate/runstate"
	historyHowToKeep = "the matrix builds earlier commits from this repository's git history: " +
		"clone without --depth, or fetch the rest (git fetch --unshallow)"
)

var commands = []string{runnerCmd, memoryPluginCmd, badgerPluginCmd, gatewayCmd}

// errNoHistory: the commit is not in this checkout.
var errNoHistory = errors.New("commit not in this checkout")

// BuildEarlierReleases builds the commands of every earlier release the
// matrix meets into the user's cache directory, where TestVersionsMeet
// finds them: they are inputs of the test, built once per machine and
// kept by commit, which never changes. A release built already is left
// as it is. It reports each release's directory, or why it could not.
func BuildEarlierReleases() (map[string]string, error) {
	dirs := map[string]string{}
	var errs []error
	for _, r := range releases {
		if r.commit == "" {
			continue
		}
		bins, err := buildCommit(r.commit)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.name, err))
			continue
		}
		dirs[r.name] = filepath.Dir(bins[runnerCmd])
	}
	return dirs, errors.Join(errs...)
}

// binaries are a release's built commands, by name.
type binaries map[string]string

// buildWorkingTree builds the commands of the module this test is part of.
func buildWorkingTree(dir string) (binaries, error) {
	pkgs := make([]string, len(commands))
	for i, c := range commands {
		pkgs[i] = modulePath + "/cmd/" + c
	}
	paths, err := plugintest.Build(dir, pkgs...)
	if err != nil {
		return nil, err
	}
	bins := binaries{}
	for i, c := range commands {
		bins[c] = paths[pkgs[i]]
	}
	return bins, nil
}

// buildCommit returns the commands of commit, from the cache or built:
// the commit's tree is extracted (git archive) and built there, its own
// go.mod choosing the modules.
func buildCommit(commit string) (binaries, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("no cache directory for the binaries of %s: %w", commit, err)
	}
	dir := filepath.Join(cache, "runstate", "compat", commit)
	if bins, ok := cached(dir); ok {
		return bins, nil
	}
	root, err := git("", "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("%s: %w (no git checkout here: %v)", commit, errNoHistory, err)
	}
	root = strings.TrimSpace(root)
	if _, err := git(root, "cat-file", "-e", commit+"^{commit}"); err != nil {
		if shallow, _ := git(root, "rev-parse", "--is-shallow-repository"); strings.TrimSpace(shallow) == "true" {
			return nil, fmt.Errorf("%s: %w, a shallow clone", commit, errNoHistory)
		}
		return nil, fmt.Errorf("%s: %w", commit, errNoHistory)
	}
	mains, err := commandPaths(root, commit)
	if err != nil {
		return nil, err
	}
	src, err := os.MkdirTemp("", "runstate-compat-src-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	if err := extract(root, commit, src); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	// Built beside the cache entry and renamed into place, so that an
	// entry that exists is whole.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), commit+".building-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-buildvcs=false", "-o", tmp + string(filepath.Separator)}
	for _, c := range commands {
		args = append(args, "./"+mains[c])
	}
	build := gocmd.Command(args...)
	build.Dir = src
	build.Env = append(build.Env, "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s in the tree of %s: %v\n%s", strings.Join(args, " "), commit, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another test process may have put the same commit in place.
		if bins, ok := cached(dir); ok {
			return bins, nil
		}
		return nil, err
	}
	bins, ok := cached(dir)
	if !ok {
		return nil, fmt.Errorf("the build of %s left no binaries in %s", commit, dir)
	}
	return bins, nil
}

// cached returns the binaries in dir when every command is there.
func cached(dir string) (binaries, bool) {
	bins := binaries{}
	for _, c := range commands {
		p := filepath.Join(dir, c)
		if _, err := os.Stat(p); err != nil {
			return nil, false
		}
		bins[c] = p
	}
	return bins, true
}

// commandPaths finds each command's package in commit's tree: cmd/NAME,
// or wherever a main.go sits in a directory of that name.
func commandPaths(root, commit string) (map[string]string, error) {
	files, err := git(root, "ls-tree", "-r", "--name-only", commit)
	if err != nil {
		return nil, err
	}
	var mains []string
	for _, f := range strings.Split(files, "\n") {
		if path.Base(f) == "main.go" {
			mains = append(mains, path.Dir(f))
		}
	}
	out := map[string]string{}
	for _, c := range commands {
		if slices.Contains(mains, "cmd/"+c) {
			out[c] = "cmd/" + c
			continue
		}
		i := slices.IndexFunc(mains, func(d string) bool { return path.Base(d) == c })
		if i < 0 {
			return nil, fmt.Errorf("commit %s has no command %s (no %s/main.go in its tree)", commit, c, c)
		}
		out[c] = mains[i]
	}
	return out, nil
}

// extract writes commit's tree into dir: git archive COMMIT | tar -x.
func extract(root, commit, dir string) error {
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return err
	}
	err = archive.Run()
	if werr := untar.Wait(); werr != nil && err == nil {
		return fmt.Errorf("tar -x of %s: %v: %s", commit, werr, untarErr.String())
	}
	if err != nil {
		return fmt.Errorf("git archive %s: %v: %s", commit, err, archiveErr.String())
	}
	return nil
}

// git runs git in dir (the current directory when empty) and returns its
// standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
