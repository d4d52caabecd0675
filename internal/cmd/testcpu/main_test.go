package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The binary's exit status comes back, and the final line counts the CPU
// of a grandchild it waited for, under the package's import path.
func TestTheTreesCPUIsRecorded(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cpu.jsonl")
	// The shell's child burns CPU; the shell waits for it, and exits 7.
	code := run("/bin/sh", []string{"-c", `sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'; exit 7`}, out)
	if code != 7 {
		t.Errorf("exit %d, want the binary's 7", code)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last Sample
	s := bufio.NewScanner(f)
	for s.Scan() {
		if err := json.Unmarshal(s.Bytes(), &last); err != nil {
			t.Fatalf("%q: %v", s.Text(), err)
		}
	}
	if !last.Final || last.CPU <= 0 || last.Package != "github.com/runstate/runstate/internal/cmd/testcpu" || last.PID == 0 {
		t.Errorf("last line %+v: want the final one, with the loop's CPU, this package and the binary's pid", last)
	}
}
