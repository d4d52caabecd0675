// Package buildinfo says which build of the kit a binary is, and prints
// what every command answers when asked its version: the kit's version,
// the protocol's, and the features this build's protocol knows.
package buildinfo

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/runstate/runstate/protocol"
)

// Version is the kit's version of this binary (see version).
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return devel
	}
	return version(info)
}

const devel = "devel"

// pseudoVersion matches the versions Go makes up for a commit that no tag
// names (golang.org/x/mod/module.IsPseudoVersion), the "+dirty" of a
// modified checkout left off.
var pseudoVersion = regexp.MustCompile(`^v[0-9]+\.(0\.0-|\d+\.\d+-([^+]*\.)?0\.)\d{14}-[A-Za-z0-9]+(\+incompatible)?$`)

// version is the kit's version as info tells it: the main module's version
// when the binary was built from a released module version (go install
// …@v1.2.0, or a clean checkout at its tag); else "devel" with the
// commit it was built from, "+dirty" when the checkout was modified; else
// the module's version as the go command made it up; else "devel".
func version(info *debug.BuildInfo) string {
	var revision string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	v := info.Main.Version
	made := v == "" || v == "(devel)"
	released := !made && !modified && !pseudoVersion.MatchString(strings.TrimSuffix(v, "+dirty"))
	switch {
	case released:
		return v
	case revision != "":
		const short = 12 // as a pseudo-version's
		if len(revision) > short {
			revision = revision[:short]
		}
		if modified {
			revision += "+dirty"
		}
		return devel + " " + revision
	case !made:
		return v
	}
	return devel
}

// Versions is what a command prints when asked its version.
type Versions struct {
	Kit      string `json:"kit_version"`
	Protocol string `json:"protocol_version"`
	// Plugin and PluginVersion name a plugin binary's store
	// (plugin.WithName); other commands leave them empty.
	Plugin        string `json:"plugin,omitempty"`
	PluginVersion string `json:"plugin_version,omitempty"`
	// Features are the features this build's protocol knows, which a
	// server of it may announce (protocol.Features).
	Features []string `json:"features"`
}

// Current is this binary's Versions, without a plugin.
func Current() Versions {
	return Versions{Kit: Version(), Protocol: protocol.Version, Features: protocol.Features()}
}

// CheckFormat refuses a format Write does not take.
func CheckFormat(format string) error {
	if format != "text" && format != "json" {
		return fmt.Errorf("--format %q: want text or json", format)
	}
	return nil
}

// Write prints v as text, a "key: value" line each, or as one JSON object.
func (v Versions) Write(w io.Writer, format string) error {
	if err := CheckFormat(format); err != nil {
		return err
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintf(w, "kit: %s\nprotocol: %s\n", v.Kit, v.Protocol)
	if v.Plugin != "" {
		fmt.Fprintf(w, "plugin: %s\n", strings.TrimSpace(v.Plugin+" "+v.PluginVersion))
	}
	_, err := fmt.Fprintf(w, "features: %s\n", strings.Join(v.Features, " "))
	return err
}
