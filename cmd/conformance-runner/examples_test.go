package main

import (
	"strings"
	"testing"
)

// Every example --help shows runs as written: its flags parse, and the
// checks made before anything starts (flag values, rule selection, store
// flags) accept them. Nothing is started.
func TestHelpExamplesParse(t *testing.T) {
	root := newRoot()
	commands := 0
	for _, cmd := range append(root.Commands(), root) {
		if cmd.Example == "" {
			continue
		}
		commands++
		for _, line := range exampleCommands(cmd.Example) {
			args := shellWords(t, line)
			if len(args) == 0 || args[0] != "conformance-runner" {
				t.Errorf("example %q does not start with conformance-runner", line)
				continue
			}
			fresh := newRoot() // flags keep their values: one tree per example
			c, rest, err := fresh.Find(args[1:])
			if err != nil {
				t.Errorf("example %q: %v", line, err)
				continue
			}
			if err := c.ParseFlags(rest); err != nil {
				t.Errorf("example %q: %v", line, err)
				continue
			}
			if c.Args != nil {
				if err := c.Args(c, c.Flags().Args()); err != nil {
					t.Errorf("example %q: %v", line, err)
					continue
				}
			}
			if c.PreRunE != nil {
				if err := c.PreRunE(c, c.Flags().Args()); err != nil {
					t.Errorf("example %q: %v", line, err)
				}
			}
		}
	}
	if commands < 3 {
		t.Fatalf("examples of %d commands found, want the root's, bench's and certify's", commands)
	}
}

// exampleCommands joins an Example's lines continued with a backslash.
func exampleCommands(example string) []string {
	var out []string
	for _, cmd := range strings.Split(strings.ReplaceAll(example, "\\\n", " "), "\n") {
		if cmd = strings.TrimSpace(cmd); cmd != "" {
			out = append(out, cmd)
		}
	}
	return out
}

// shellWords splits a command line as a POSIX shell would, for the
// quoting the examples use: single quotes, double quotes, blanks.
func shellWords(t *testing.T, line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unclosed quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
