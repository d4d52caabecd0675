// Package gocmd gives the go commands that tests run (builds of plugins,
// gateways, earlier releases, the integrator's guide) the environment of
// a user's shell: make test runs every test process with one P
// (GOMAXPROCS=1, docs/testing.md), which a go build it starts would
// inherit and then compile one package at a time.
package gocmd

import (
	"os"
	"os/exec"
	"strings"
)

// Env is the test's environment without GOMAXPROCS.
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	return env
}

// Command is exec.Command("go", args...) with Env.
func Command(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Env = Env()
	return cmd
}
