package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchorTag = regexp.MustCompile(`<a id="([^"]+)"></a>`)
	heading   = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	h = anchorTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(md string) map[string]bool {
	out := map[string]bool{}
	for _, m := range anchorTag.FindAllStringSubmatch(md, -1) {
		out[m[1]] = true
	}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		out[slug(m[1])] = true
	}
	return out
}

// Every link between the repository's documents reaches a file that exists
// and, when it names one, an anchor in it.
func TestLinksBetweenDocumentsResolve(t *testing.T) {
	files := []string{"../README.md"}
	matches, _ := filepath.Glob("*.md")
	files = append(files, matches...)
	perf, _ := filepath.Glob("perf/*.md") // bench reports link their charts
	files = append(files, perf...)
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(body), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			destBody, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s links to %s, which does not exist", file, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(string(destBody))[anchor] {
				t.Errorf("%s links to %s: %s has no anchor %q", file, target, dest, anchor)
			}
		}
	}
}

// The repository cites its requirements from docs/requirements.md, never
// from documents outside it.
func TestCitationsStayInsideTheRepository(t *testing.T) {
	outside := regexp.MustCompile(`shared/seeds|DECISIONS\.md|\(DECISIONS\)|\bseeds? 00\d`)
	filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(body), "\n") {
			if outside.MatchString(line) && !strings.HasSuffix(path, "links_test.go") {
				t.Errorf("%s:%d cites a document outside the repository: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
}

// README names the Go release go.mod's go directive asks for.
func TestReadmeNamesTheGoReleaseGoModNeeds(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	directive := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`Go (\d+\.\d+) or later`).FindSubmatch(readme)
	if directive == nil || named == nil || string(directive[1]) != string(named[1]) {
		t.Errorf("go.mod says go %s; README says Go %s or later", directive[1], named[1])
	}
}
