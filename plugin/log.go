package plugin

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// hcLogger lets go-plugin, which logs through hclog, log through slog:
// the plugin's own log lines arrive here too, with their attributes.
type hcLogger struct {
	l    *slog.Logger
	name string
	args []any
	// quietExit: the plugin failed to start and was ended on purpose, so
	// go-plugin's complaint that it did not exit gracefully is noise.
	quietExit *atomic.Bool
	// output keeps the plugin's last lines, which go-plugin logs through
	// a named logger, for the error of a start that fails.
	output *outputTail
}

func newHCLogger(l *slog.Logger) *hcLogger {
	return &hcLogger{l: l, quietExit: new(atomic.Bool), output: &outputTail{}}
}

// outputTail keeps the last lines a plugin process wrote to stderr.
type outputTail struct {
	mu    sync.Mutex
	lines []string
}

// tailLines is how many of the plugin's last lines a failed start quotes.
const tailLines = 5

func (t *outputTail) add(msg string, args []any) {
	line := msg
	for i := 0; i+1 < len(args); i += 2 {
		line += fmt.Sprintf(" %v=%v", args[i], args[i+1])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

// explain adds the plugin's last lines, if it wrote any, to err, which
// errors.Is still matches.
func (t *outputTail) explain(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return err
	}
	return fmt.Errorf("%w; the plugin's last output: %s", err, strings.Join(t.lines, " | "))
}

// renameKeys gives go-plugin's "plugin" (the binary's path) its own name:
// the host's logger already says plugin=NAME, and a key twice on one line
// reads as a mistake.
func renameKeys(args []any) []any {
	out := append([]any{}, args...)
	for i := 0; i+1 < len(out); i += 2 {
		if out[i] == "plugin" {
			out[i] = "path"
		}
	}
	return out
}

var hcLevels = map[hclog.Level]slog.Level{
	hclog.Trace: slog.LevelDebug - 4, hclog.Debug: slog.LevelDebug, hclog.Info: slog.LevelInfo,
	hclog.Warn: slog.LevelWarn, hclog.Error: slog.LevelError,
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	lv, ok := hcLevels[level]
	if !ok {
		lv = slog.LevelInfo
	}
	if msg == "plugin failed to exit gracefully" && h.quietExit.Load() {
		lv = slog.LevelDebug
	}
	attrs := append(append([]any{}, h.args...), renameKeys(args)...)
	if h.name != "" {
		if h.pluginOutput() {
			h.output.add(msg, args)
		}
		attrs = append(attrs, "logger", h.name)
	}
	h.l.Log(context.Background(), lv, msg, attrs...)
}

// stdioLogger names the logger of go-plugin's own stdio stream ("waiting
// for stdio data", "received EOF" with the plugin's Unimplemented answer):
// the host's words about the stream, not the plugin's output.
const stdioLogger = "stdio"

// pluginOutput reports whether h logs the plugin process's own lines: those
// come through a named logger (go-plugin names it after the binary), and
// so does go-plugin's stdio stream, which a failed start does not quote.
func (h *hcLogger) pluginOutput() bool {
	return h.name != "" && h.name != stdioLogger && !strings.HasSuffix(h.name, "."+stdioLogger)
}

func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) enabled(lv hclog.Level) bool {
	return h.l.Enabled(context.Background(), hcLevels[lv])
}
func (h *hcLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcLogger) ImpliedArgs() []any { return h.args }
func (h *hcLogger) With(args ...any) hclog.Logger {
	return &hcLogger{l: h.l, name: h.name, quietExit: h.quietExit, output: h.output, args: append(append([]any{}, h.args...), args...)}
}
func (h *hcLogger) Name() string { return h.name }
func (h *hcLogger) Named(name string) hclog.Logger {
	n := name
	if h.name != "" {
		n = h.name + "." + name
	}
	return &hcLogger{l: h.l, name: n, quietExit: h.quietExit, output: h.output, args: h.args}
}
func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{l: h.l, name: name, quietExit: h.quietExit, output: h.output, args: h.args}
}

// The level is the slog handler's business.
func (h *hcLogger) SetLevel(hclog.Level)  {}
func (h *hcLogger) GetLevel() hclog.Level { return hclog.Debug }

func (h *hcLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}
func (h *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
