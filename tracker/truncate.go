package tracker

import "unicode/utf8"

// Truncate shortens s to at most max bytes without splitting a UTF-8
// sequence; a shortened text ends with a mark saying so.
func Truncate(s string, limit int) string {
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
