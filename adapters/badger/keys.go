package badger

import (
	"bytes"
	"encoding/binary"
	"slices"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Key layout. Every key starts with a one-byte table tag and a 0x00. Text
// parts end with 0x00, which spec validation keeps out of ids, names, label
// keys and values, so prefixes never run into each other. Numbers are
// big-endian so that byte order is numeric order.
//
//	r 0 <run_id>                                  storedRun (snapshot + last audit seq)
//	l 0 <run_id>                                  driver.LeaseState
//	a 0 <run_id> 0 <seq>                          runstate.AuditEvent
//	c 0 <created> <run_id>                        index: every run, ListRuns order
//	s 0 <status> 0 <created> <run_id>             index: runs by status
//	w 0 <workflow> 0 <created> <run_id>           index: runs by workflow name
//	b 0 <label key> 0 <label value> 0 <created> <run_id>   index: runs by label
//	q 0 <status> 0 <inverted priority> <created> <run_id>  index: unleased non-terminal runs, claim order
//	x 0 <status> 0 <expires> <run_id>             index: leased non-terminal runs, by lease expiry
//	o 0 <worker> 0 <incarnation> 0 <run_id>       index: leased non-terminal runs, by lease owner
//	m 0 schema                                    layout version
//
// Index keys are a function of a run's snapshot and lease (indexKeys), and
// every write of either moves them in the same transaction. A terminal run
// leaves q, x and o, and a leased one leaves q, so claim-next reads the head
// of q, the expired part of x and the o entries of its worker's other
// incarnations: its cost follows the runnable runs, not the history or the
// runs being worked on.
const (
	tagRun      = 'r'
	tagLease    = 'l'
	tagAudit    = 'a'
	tagCreated  = 'c'
	tagStatus   = 's'
	tagWorkflow = 'w'
	tagLabel    = 'b'
	tagQueue    = 'q'
	tagExpiry   = 'x'
	tagOwner    = 'o'
	tagMeta     = 'm'
)

// schemaVersion is stored under m 0 schema; Open refuses a directory written
// with a layout it does not know.
const schemaVersion = "2"

func key(tag byte, parts ...[]byte) []byte {
	n := 2
	for _, p := range parts {
		n += len(p)
	}
	k := make([]byte, 0, n)
	k = append(k, tag, 0)
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

func text(s string) []byte { return append([]byte(s), 0) }

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// micros orders times, including any before 1970, as unsigned integers.
func micros(t time.Time) []byte { return u64(uint64(t.UnixMicro()) ^ 1<<63) }

func parseMicros(b []byte) time.Time {
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b) ^ 1<<63)).UTC()
}

// invPriority sorts higher priorities first.
func invPriority(p int) []byte { return u64(uint64(runstate.MaxPriority - p)) }

func runKey(id string) []byte   { return key(tagRun, []byte(id)) }
func leaseKey(id string) []byte { return key(tagLease, []byte(id)) }
func auditPrefix(id string) []byte {
	return key(tagAudit, text(id))
}
func auditKey(id string, seq int64) []byte { return append(auditPrefix(id), u64(uint64(seq))...) }
func metaKey(name string) []byte           { return key(tagMeta, []byte(name)) }

// Index prefixes: every key below one is ordered by (created, run_id), or,
// for queuePrefix, by claim order.
func createdPrefix() []byte                     { return key(tagCreated) }
func statusPrefix(st runstate.RunStatus) []byte { return key(tagStatus, text(string(st))) }
func workflowPrefix(wf string) []byte           { return key(tagWorkflow, text(wf)) }
func labelPrefix(k, v string) []byte            { return key(tagLabel, text(k), text(v)) }
func queuePrefix(st runstate.RunStatus) []byte  { return key(tagQueue, text(string(st))) }
func expiryPrefix(st runstate.RunStatus) []byte { return key(tagExpiry, text(string(st))) }
func ownerPrefix(worker string) []byte          { return key(tagOwner, text(worker)) }
func ownerIncarnationPrefix(o runstate.Owner) []byte {
	return append(ownerPrefix(o.Worker), text(o.Incarnation)...)
}

// indexKeys returns every index key of a run with snapshot s and lease l.
// The keys are cut from one buffer: a write computes them twice (before
// and after), and a key a piece would cost several allocations each.
func indexKeys(s runstate.RunSnapshot, l driver.LeaseState) [][]byte {
	var kb keyBuilder
	kb.buf = make([]byte, 0, 160+len(s.WorkflowName)+8*len(s.RunID)+64*len(s.Labels))
	keys := make([][]byte, 0, 5+len(s.Labels))
	created := micros(s.CreatedAt)
	withPos := func(k []byte) []byte { return kb.finish(append(append(k, created...), s.RunID...)) }
	keys = append(keys,
		withPos(kb.start(tagCreated)),
		withPos(kb.text(kb.start(tagStatus), string(s.Status))),
		withPos(kb.text(kb.start(tagWorkflow), s.WorkflowName)))
	for k, v := range s.Labels {
		keys = append(keys, withPos(kb.text(kb.text(kb.start(tagLabel), k), v)))
	}
	switch driver.QueueOf(s, l) {
	case driver.QueueNone:
	case driver.QueueUnleased:
		keys = append(keys, withPos(append(kb.text(kb.start(tagQueue), string(s.Status)), invPriority(s.Priority)...)))
	case driver.QueueLeased:
		keys = append(keys,
			kb.finish(append(append(kb.text(kb.start(tagExpiry), string(s.Status)), micros(l.ExpiresAt)...), s.RunID...)),
			kb.finish(append(kb.text(kb.text(kb.start(tagOwner), l.Owner.Worker), l.Owner.Incarnation), s.RunID...)))
	}
	return keys
}

// keyBuilder writes keys one after another into one buffer, in the layout
// of key and text: start begins a key, text adds a 0-terminated part and
// finish cuts the key off (capped, so nothing appends into the next one).
type keyBuilder struct {
	buf  []byte
	from int
}

func (kb *keyBuilder) start(tag byte) []byte {
	kb.from = len(kb.buf)
	kb.buf = append(kb.buf, tag, 0)
	return kb.buf
}

func (kb *keyBuilder) text(k []byte, s string) []byte { return append(append(k, s...), 0) }

func (kb *keyBuilder) finish(k []byte) []byte {
	kb.buf = k
	return k[kb.from:len(k):len(k)]
}

// indexChanges returns the index keys to delete and to set when a run's
// (snapshot, lease) changes from old to new (old nil: a new run).
func indexChanges(old *indexed, new indexed) (del, set [][]byte) {
	next := indexKeys(new.run, new.lease)
	if old == nil {
		return nil, next
	}
	prev := indexKeys(old.run, old.lease)
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

// indexed is what the index keys of a run depend on.
type indexed struct {
	run   runstate.RunSnapshot
	lease driver.LeaseState
}

// runPosAfter is the first key of prefix strictly after the position:
// run ids hold no 0x00, so appending one yields the key's successor.
func runPosAfter(prefix []byte, p driver.RunPosition) []byte {
	return append(append(append(slices.Clone(prefix), micros(p.CreatedAt)...), p.RunID...), 0)
}

func queuePosAfter(prefix []byte, p driver.RunnablePosition) []byte {
	k := append(slices.Clone(prefix), invPriority(p.Priority)...)
	return append(append(append(k, micros(p.CreatedAt)...), p.RunID...), 0)
}

// runIDOf returns the run id at the end of an index key whose fixed part
// (prefix plus numbers) is n bytes long.
func runIDOf(k []byte, n int) string { return string(k[n:]) }
