package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// markCommand is a shell command that records its own execution in file:
// a start line, a tick every 100ms while it works for about d, an end
// line. Each line names the run, step, host, lease token and the shell's
// pid, which tells executions apart. It also holds, for its whole life, a
// lock of its run, step and host (flock on a file next to file): an
// execution that finds the lock taken writes an overlap line, so two
// executions at once are caught however short the overlap.
func markCommand(file string, d time.Duration) string {
	ticks := max(int(d/(100*time.Millisecond)), 1)
	return fmt.Sprintf(`m() { echo "$RUNSTATE_RUN_ID $RUNSTATE_STEP $RUNSTATE_HOST ${RUNSTATE_LEASE_TOKEN:-0} $$ $1 $(date +%%s%%N)" >> %s; }; `+
		`exec 9>>"%s.$RUNSTATE_RUN_ID.$RUNSTATE_STEP.$RUNSTATE_HOST.lock"; flock -n 9 || m overlap; `+
		`m start; i=0; while [ $i -lt %d ]; do sleep 0.1; m tick; i=$((i+1)); done; m end`, file, file, ticks)
}

// execution is one run of a host command, as its markers show it.
type execution struct {
	run, step, host string
	token           int64
	pid             string
	first, last     time.Time
	ended           bool
	// overlapped: it found another execution of its run, step and host
	// holding the lock when it started.
	overlapped bool
}

// readExecutions parses a marker file.
func readExecutions(t *testing.T, file string) []*execution {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byPID := map[string]*execution{}
	var out []*execution
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			continue // a line cut short by a kill
		}
		ns, err := strconv.ParseInt(fs[6], 10, 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, ns)
		key := fs[0] + " " + fs[1] + " " + fs[2] + " " + fs[4]
		e := byPID[key]
		if e == nil {
			token, _ := strconv.ParseInt(fs[3], 10, 64)
			e = &execution{run: fs[0], step: fs[1], host: fs[2], token: token, pid: fs[4], first: at, last: at}
			byPID[key] = e
			out = append(out, e)
		}
		if at.Before(e.first) {
			e.first = at
		}
		if at.After(e.last) {
			e.last = at
		}
		e.ended = e.ended || fs[5] == "end"
		e.overlapped = e.overlapped || fs[5] == "overlap"
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first.Before(out[j].first) })
	return out
}

// overlaps counts pairs of executions of the same run, step and host whose
// lifetimes overlap (by their markers), and executions that found the lock
// of their run, step and host taken: the same step running twice at once.
func overlaps(execs []*execution) (n int, examples []string) {
	for _, e := range execs {
		if e.overlapped {
			n++
			examples = append(examples, fmt.Sprintf("run %s step %s host %s: token %d (pid %s) found another execution holding the lock",
				e.run, e.step, e.host, e.token, e.pid))
		}
	}
	for i, a := range execs {
		for _, b := range execs[i+1:] {
			if a.run == b.run && a.step == b.step && a.host == b.host && a.first.Before(b.last) && b.first.Before(a.last) {
				n++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("run %s step %s host %s: token %d (pid %s) %s..%s and token %d (pid %s) %s..%s",
						a.run, a.step, a.host, a.token, a.pid, a.first.Format("15:04:05.000"), a.last.Format("15:04:05.000"),
						b.token, b.pid, b.first.Format("15:04:05.000"), b.last.Format("15:04:05.000")))
				}
			}
		}
	}
	return n, examples
}
