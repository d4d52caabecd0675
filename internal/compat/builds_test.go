package compat

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

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
