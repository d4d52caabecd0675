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
	"sync"
	"testing"

	"github.com/runstate/runstate/plugin/plugintest"
)

// A release is a version of runstate the matrix meets: a commit of this
// repository's history, or the working tree.
type release struct {
	name     string // as the matrix names it
	commit   string // full hash; empty for the working tree
	protocol string // the plugin protocol it speaks, for the matrix's table
}

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

// binaries are a release's built commands, by name.
type binaries map[string]string

// builds builds each release's binaries once per test binary: the working
// tree's into dir, a commit's into the user's cache directory, where they
// stay for later runs (the cache is keyed by commit, which never changes).
type builds struct {
	dir string
	mu  sync.Mutex
	of  map[string]*build
}

type build struct {
	once sync.Once
	bins binaries
	err  error
}

func newBuilds(t *testing.T) *builds {
	return &builds{dir: t.TempDir(), of: map[string]*build{}}
}

// errNoHistory: the commit is not in this checkout.
var errNoHistory = errors.New("commit not in this checkout")

// binaries returns r's binaries, building them the first time. Without
// the git history that holds r the test fails under CI=true, which must
// never pass a test it did not run, and skips elsewhere.
func (b *builds) binaries(t *testing.T, r release) binaries {
	t.Helper()
	b.mu.Lock()
	bl, ok := b.of[r.name]
	if !ok {
		bl = &build{}
		b.of[r.name] = bl
	}
	b.mu.Unlock()
	bl.once.Do(func() {
		if r.commit == "" {
			bl.bins, bl.err = buildWorkingTree(filepath.Join(b.dir, r.name))
		} else {
			bl.bins, bl.err = buildCommit(r.commit)
		}
	})
	switch {
	case errors.Is(bl.err, errNoHistory) && os.Getenv("CI") == "true":
		t.Fatalf("%v (CI=true forbids skipping): %s", bl.err, historyHowToKeep)
	case errors.Is(bl.err, errNoHistory):
		t.Skipf("SKIPPING: %v: %s", bl.err, historyHowToKeep)
	case bl.err != nil:
		t.Fatalf("building %s: %v", r.name, bl.err)
	}
	return bl.bins
}

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
	build := exec.Command("go", args...)
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
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
