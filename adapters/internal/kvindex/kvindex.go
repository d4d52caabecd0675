// Package kvindex is the ordered key layout of the key-value reference
// stores (Badger, etcd): the tables of runs, leases and audit events, and
// the indexes that let listings and claims read only what they return.
//
// Every key starts with the layout's prefix, a one-byte table tag and a
// 0x00. Text parts end with 0x00, which spec validation keeps out of ids,
// names, label keys and values, so prefixes never run into each other.
// Numbers are big-endian so that byte order is numeric order, which is the
// order of an iterator or a range read.
//
//	P r 0 <run_id>                                    the run (its snapshot; a store may keep its lease here too)
//	P l 0 <run_id>                                    the run's lease, for a store that keeps it apart
//	P a 0 <run_id> 0 <seq>                            runstate.AuditEvent
//	P c 0 <created> <run_id>                          index: every run, ListRuns order
//	P s 0 <status> 0 <created> <run_id>               index: runs by status
//	P w 0 <workflow> 0 <created> <run_id>             index: runs by workflow name
//	P b 0 <label key> 0 <label value> 0 <created> <run_id>  index: runs by label
//	P q 0 <status> 0 <inverted priority> <created> <run_id> index: unleased non-terminal runs, claim order
//	P x 0 <status> 0 <expires> <run_id>               index: leased non-terminal runs, by lease expiry
//	P p 0 <status> 0 <wake_at> <run_id>               index: parked unleased runs, by wake time
//	P o 0 <worker> 0 <incarnation> 0 <run_id>         index: leased non-terminal runs, by lease owner
//	P m 0 <name>                                      store metadata, such as the layout version
//
// Index keys are a function of a run's snapshot and lease (IndexKeys), and
// a store moves them in the write that changes either (IndexChanges). A
// terminal run leaves q, x and o, and a leased one leaves q, so claim-next
// reads the head of q, the expired part of x and the o entries of its
// worker's other incarnations, and the due part of p: its cost follows the
// runnable runs, not the history, the runs being worked on or the runs
// parked until later.
package kvindex

import (
	"bytes"
	"encoding/binary"
	"slices"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Table tags, the byte after the prefix.
const (
	TagRun      = 'r'
	TagLease    = 'l'
	TagAudit    = 'a'
	TagCreated  = 'c'
	TagStatus   = 's'
	TagWorkflow = 'w'
	TagLabel    = 'b'
	TagQueue    = 'q'
	TagExpiry   = 'x'
	TagParked   = 'p'
	TagOwner    = 'o'
	TagMeta     = 'm'
)

// Widths of the fixed parts that follow an index prefix: a position in
// ListRuns order is micros then the run id; in claim order the inverted
// priority comes first.
const (
	PositionWidth = 8
	ClaimWidth    = 16
)

// Layout builds keys under one prefix (empty for a store of its own).
type Layout struct{ Prefix []byte }

// Key is the prefix, tag, 0x00 and parts, in a new slice.
func (l Layout) Key(tag byte, parts ...[]byte) []byte {
	n := len(l.Prefix) + 2
	for _, p := range parts {
		n += len(p)
	}
	k := make([]byte, 0, n)
	k = append(append(k, l.Prefix...), tag, 0)
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

// Text is s ended by 0x00.
func Text(s string) []byte { return append([]byte(s), 0) }

// U64 is v big-endian.
func U64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Micros orders times, including any before 1970, as unsigned integers.
func Micros(t time.Time) []byte { return U64(uint64(t.UnixMicro()) ^ 1<<63) }

// ParseMicros reads what Micros wrote.
func ParseMicros(b []byte) time.Time {
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b) ^ 1<<63)).UTC()
}

// InvPriority sorts higher priorities first.
func InvPriority(p int) []byte { return U64(uint64(runstate.MaxPriority - p)) }

func (l Layout) Run(id string) []byte         { return l.Key(TagRun, []byte(id)) }
func (l Layout) Lease(id string) []byte       { return l.Key(TagLease, []byte(id)) }
func (l Layout) AuditPrefix(id string) []byte { return l.Key(TagAudit, Text(id)) }
func (l Layout) Audit(id string, seq int64) []byte {
	return append(l.AuditPrefix(id), U64(uint64(seq))...)
}
func (l Layout) Meta(name string) []byte { return l.Key(TagMeta, []byte(name)) }

// Index prefixes: every key below one is ordered by (created, run_id), or,
// for Queue, by claim order.
func (l Layout) Created() []byte                     { return l.Key(TagCreated) }
func (l Layout) Status(st runstate.RunStatus) []byte { return l.Key(TagStatus, Text(string(st))) }
func (l Layout) Workflow(wf string) []byte           { return l.Key(TagWorkflow, Text(wf)) }
func (l Layout) Label(k, v string) []byte            { return l.Key(TagLabel, Text(k), Text(v)) }
func (l Layout) Queue(st runstate.RunStatus) []byte  { return l.Key(TagQueue, Text(string(st))) }
func (l Layout) Expiry(st runstate.RunStatus) []byte { return l.Key(TagExpiry, Text(string(st))) }
func (l Layout) Parked(st runstate.RunStatus) []byte { return l.Key(TagParked, Text(string(st))) }
func (l Layout) Owner(worker string) []byte          { return l.Key(TagOwner, Text(worker)) }
func (l Layout) OwnerIncarnation(o runstate.Owner) []byte {
	return append(l.Owner(o.Worker), Text(o.Incarnation)...)
}

// IndexKeys returns every index key of a run with snapshot s and lease ls.
// The keys are cut from one buffer: a write computes them twice (before
// and after), and a key a piece would cost several allocations each.
func (l Layout) IndexKeys(s runstate.RunSnapshot, ls driver.LeaseState) [][]byte {
	kb := keyBuilder{prefix: l.Prefix}
	kb.buf = make([]byte, 0, 160+6*len(l.Prefix)+len(s.WorkflowName)+8*len(s.RunID)+64*len(s.Labels))
	keys := make([][]byte, 0, 5+len(s.Labels))
	created := Micros(s.CreatedAt)
	withPos := func(k []byte) []byte { return kb.finish(append(append(k, created...), s.RunID...)) }
	keys = append(keys,
		withPos(kb.start(TagCreated)),
		withPos(kb.text(kb.start(TagStatus), string(s.Status))),
		withPos(kb.text(kb.start(TagWorkflow), s.WorkflowName)))
	for k, v := range s.Labels {
		keys = append(keys, withPos(kb.text(kb.text(kb.start(TagLabel), k), v)))
	}
	switch driver.QueueOf(s, ls) {
	case driver.QueueNone:
	case driver.QueueUnleased:
		keys = append(keys, withPos(append(kb.text(kb.start(TagQueue), string(s.Status)), InvPriority(s.Priority)...)))
	case driver.QueueLeased:
		keys = append(keys,
			kb.finish(append(append(kb.text(kb.start(TagExpiry), string(s.Status)), Micros(ls.ExpiresAt)...), s.RunID...)),
			kb.finish(append(kb.text(kb.text(kb.start(TagOwner), ls.Owner.Worker), ls.Owner.Incarnation), s.RunID...)))
	case driver.QueueParked:
		keys = append(keys, kb.finish(append(append(kb.text(kb.start(TagParked), string(s.Status)), Micros(s.WakeAt)...), s.RunID...)))
	}
	return keys
}

// keyBuilder writes keys one after another into one buffer, in the layout
// of Key and Text: start begins a key, text adds a 0-terminated part and
// finish cuts the key off (capped, so nothing appends into the next one).
type keyBuilder struct {
	prefix []byte
	buf    []byte
	from   int
}

func (kb *keyBuilder) start(tag byte) []byte {
	kb.from = len(kb.buf)
	kb.buf = append(append(kb.buf, kb.prefix...), tag, 0)
	return kb.buf
}

func (kb *keyBuilder) text(k []byte, s string) []byte { return append(append(k, s...), 0) }

func (kb *keyBuilder) finish(k []byte) []byte {
	kb.buf = k
	return k[kb.from:len(k):len(k)]
}

// Indexed is what the index keys of a run depend on.
type Indexed struct {
	Run   runstate.RunSnapshot
	Lease driver.LeaseState
}

// IndexChanges returns the index keys to delete and to set when a run's
// (snapshot, lease) changes from old to new (old nil: a new run).
func (l Layout) IndexChanges(old *Indexed, new Indexed) (del, set [][]byte) {
	next := l.IndexKeys(new.Run, new.Lease)
	if old == nil {
		return nil, next
	}
	prev := l.IndexKeys(old.Run, old.Lease)
	has := func(list [][]byte, k []byte) bool {
		return slices.ContainsFunc(list, func(x []byte) bool { return bytes.Equal(x, k) })
	}
	for _, k := range prev {
		if !has(next, k) {
			del = append(del, k)
		}
	}
	for _, k := range next {
		if !has(prev, k) {
			set = append(set, k)
		}
	}
	return del, set
}

// ListPrefixes picks the index prefixes a filtered listing walks: the
// most selective the filter allows (its statuses, else its workflow, else
// its first label in key order, else every run). Each is ordered by
// (created, run_id); the caller applies the whole filter to what they
// yield and merges several in that order (LIST-005).
func (l Layout) ListPrefixes(f driver.RunFilter) [][]byte {
	switch {
	case len(f.Statuses) > 0:
		var out [][]byte
		for _, st := range f.Statuses {
			if pre := l.Status(st); !slices.ContainsFunc(out, func(x []byte) bool { return bytes.Equal(x, pre) }) {
				out = append(out, pre)
			}
		}
		return out
	case f.WorkflowName != "":
		return [][]byte{l.Workflow(f.WorkflowName)}
	case len(f.Labels) > 0:
		keys := make([]string, 0, len(f.Labels))
		for k := range f.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return [][]byte{l.Label(keys[0], f.Labels[keys[0]])}
	}
	return [][]byte{l.Created()}
}

// RunPosAfter is the first key of prefix strictly after the position:
// run ids hold no 0x00, so appending one yields the key's successor.
func RunPosAfter(prefix []byte, p driver.RunPosition) []byte {
	return append(append(append(slices.Clone(prefix), Micros(p.CreatedAt)...), p.RunID...), 0)
}

// QueuePosAfter is RunPosAfter in claim order.
func QueuePosAfter(prefix []byte, p driver.RunnablePosition) []byte {
	k := append(slices.Clone(prefix), InvPriority(p.Priority)...)
	return append(append(append(k, Micros(p.CreatedAt)...), p.RunID...), 0)
}

// RunIDOf returns the run id at the end of an index key whose fixed part
// (prefix plus numbers) is n bytes long.
func RunIDOf(k []byte, n int) string { return string(k[n:]) }
