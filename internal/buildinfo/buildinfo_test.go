package buildinfo

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/runstate/runstate/protocol"
)

const revision = "e46bf62c1d28467de7d95fe7c0765c3e3dbb0a25"

func buildInfo(mainVersion string, settings ...string) *debug.BuildInfo {
	info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/runstate/runstate", Version: mainVersion}}
	for i := 0; i < len(settings); i += 2 {
		info.Settings = append(info.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return info
}

// A release prints its version; any other build says it is a development
// build and, where the go command recorded it, the commit it came from.
func TestVersionOfEveryKindOfBuild(t *testing.T) {
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"go install of a release", buildInfo("v1.2.0"), "v1.2.0"},
		{"a clean checkout at the release's tag", buildInfo("v1.2.0", "vcs.revision", revision, "vcs.modified", "false"), "v1.2.0"},
		{"a modified checkout at a tag", buildInfo("v1.2.0+dirty", "vcs.revision", revision, "vcs.modified", "true"), "devel e46bf62c1d28+dirty"},
		{"a checkout between tags", buildInfo("v1.2.1-0.20261127212234-e46bf62c1d28", "vcs.revision", revision, "vcs.modified", "false"), "devel e46bf62c1d28"},
		{"a checkout with no tag", buildInfo("v0.0.0-20261127212234-e46bf62c1d28+dirty", "vcs.revision", revision, "vcs.modified", "true"), "devel e46bf62c1d28+dirty"},
		{"go build without version control information", buildInfo("(devel)"), "devel"},
		{"a test binary", buildInfo(""), "devel"},
		{"go install of a commit", buildInfo("v0.0.0-20261127212234-e46bf62c1d28"), "v0.0.0-20261127212234-e46bf62c1d28"},
	} {
		if got := version(c.info); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestVersionsAsTextAndAsJSON(t *testing.T) {
	v := Versions{Kit: "v1.2.0", Protocol: "1.7", Plugin: "mystore", PluginVersion: "0.3.0", Features: []string{"leases", "principal"}}
	var text bytes.Buffer
	if err := v.Write(&text, "text"); err != nil {
		t.Fatal(err)
	}
	if want := "kit: v1.2.0\nprotocol: 1.7\nplugin: mystore 0.3.0\nfeatures: leases principal\n"; text.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", text.String(), want)
	}
	var out bytes.Buffer
	if err := v.Write(&out, "json"); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["kit_version"] != "v1.2.0" || got["protocol_version"] != "1.7" || got["plugin"] != "mystore" || got["plugin_version"] != "0.3.0" || len(got["features"].([]any)) != 2 {
		t.Errorf("json: %s", out.String())
	}
	if err := v.Write(&out, "yaml"); err == nil {
		t.Error("yaml: no error")
	}
}

// A command that is not a plugin names none; every command names the
// protocol's version and all its features.
func TestCurrentVersionsNameTheProtocolAndEveryFeature(t *testing.T) {
	v := Current()
	if v.Protocol != protocol.Version || v.Kit == "" || v.Plugin != "" {
		t.Errorf("current: %+v", v)
	}
	for _, f := range []string{protocol.FeatureLeases, protocol.FeatureWatchRun, protocol.FeatureUpdateReleaseLease, protocol.FeaturePrincipal, protocol.FeatureBatchClaimStart} {
		if !slices.Contains(v.Features, f) {
			t.Errorf("features %v lack %s", v.Features, f)
		}
	}
	var text bytes.Buffer
	v.Write(&text, "text")
	if bytes.Contains(text.Bytes(), []byte("plugin:")) {
		t.Errorf("a command that is not a plugin names one:\n%s", text.String())
	}
}
