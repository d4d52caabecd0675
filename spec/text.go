package spec

import "unicode/utf8"

// TruncateOutput shortens s to at most MaxHostOutputBytes, marking the cut,
// so that a tracker never exceeds the limit.
func TruncateOutput(s string) string { return TruncateText(s, MaxHostOutputBytes) }

// TruncateText shortens s to at most max bytes without splitting a UTF-8
// sequence; a shortened text ends with a mark saying so.
func TruncateText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	mark := "…[truncated]"
	if limit < len(mark) {
		mark = ""
	}
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
