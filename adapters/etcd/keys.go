package etcd

import (
	"encoding/binary"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Key layout, under Options.Prefix (P). After the prefix every key has a
// one-byte table tag and a 0x00. Text parts end with 0x00, which spec
// validation keeps out of ids, names, label keys and values, so prefixes
// never run into each other. Numbers are big-endian so that byte order is
// numeric order, which is the order of an etcd range read.
//
//	P r 0 <run_id>                                    storedRun: snapshot, lease, last audit seq
//	P a 0 <run_id> 0 <seq>                            runstate.AuditEvent
//	P c 0 <created> <run_id>                          index: every run, ListRuns order
//	P s 0 <status> 0 <created> <run_id>               index: runs by status
//	P w 0 <workflow> 0 <created> <run_id>             index: runs by workflow name
//	P b 0 <label key> 0 <label value> 0 <created> <run_id>  index: runs by label
//	P q 0 <status> 0 <inverted priority> <created> <run_id> index: unleased non-terminal runs, claim order
//	P x 0 <status> 0 <expires> <run_id>               index: leased non-terminal runs, by lease expiry
//	P o 0 <worker> 0 <incarnation> 0 <run_id>         index: leased non-terminal runs, by lease owner
//	P m 0 schema                                      layout version
//
// Index keys have empty values and are a function of a run's snapshot and
// lease (indexKeys): every write of a run moves them in the transaction
// that writes the run. A terminal run leaves q, x and o, and a leased one
// leaves q, so a claim reads the head of q, the expired part of x and its
// worker's o entries: its cost follows the runnable runs, not the history.
const (
	tagRun      = 'r'
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

// keys builds the store's keys under one prefix.
type keys struct{ prefix string }

func (k keys) key(tag byte, parts ...string) string {
	b := make([]byte, 0, len(k.prefix)+2+64)
	b = append(append(b, k.prefix...), tag, 0)
	for _, p := range parts {
		b = append(b, p...)
	}
	return string(b)
}

func text(s string) string { return s + "\x00" }

func u64(v uint64) string { return string(binary.BigEndian.AppendUint64(nil, v)) }

// micros orders times, including any before 1970, as unsigned integers.
func micros(t time.Time) string { return u64(uint64(t.UnixMicro()) ^ 1<<63) }

// invPriority sorts higher priorities first.
func invPriority(p int) string { return u64(uint64(runstate.MaxPriority - p)) }

func (k keys) run(id string) string                { return k.key(tagRun, id) }
func (k keys) auditPrefix(id string) string        { return k.key(tagAudit, text(id)) }
func (k keys) audit(id string, seq int64) string   { return k.auditPrefix(id) + u64(uint64(seq)) }
func (k keys) created() string                     { return k.key(tagCreated) }
func (k keys) status(st runstate.RunStatus) string { return k.key(tagStatus, text(string(st))) }
func (k keys) workflow(wf string) string           { return k.key(tagWorkflow, text(wf)) }
func (k keys) label(name, v string) string         { return k.key(tagLabel, text(name), text(v)) }
func (k keys) queue(st runstate.RunStatus) string  { return k.key(tagQueue, text(string(st))) }
func (k keys) expiry(st runstate.RunStatus) string {
	return k.key(tagExpiry, text(string(st)))
}
func (k keys) owner(worker string) string { return k.key(tagOwner, text(worker)) }
func (k keys) ownerIncarnation(o runstate.Owner) string {
	return k.owner(o.Worker) + text(o.Incarnation)
}

// indexKeys returns every index key of a run with snapshot s and lease l.
func (k keys) indexKeys(s runstate.RunSnapshot, l driver.LeaseState) []string {
	pos := micros(s.CreatedAt) + s.RunID
	out := make([]string, 0, 5+len(s.Labels))
	out = append(out, k.created()+pos, k.status(s.Status)+pos, k.workflow(s.WorkflowName)+pos)
	for name, v := range s.Labels {
		out = append(out, k.label(name, v)+pos)
	}
	switch driver.QueueOf(s, l) {
	case driver.QueueNone:
	case driver.QueueUnleased:
		out = append(out, k.queue(s.Status)+invPriority(s.Priority)+pos)
	case driver.QueueLeased:
		out = append(out,
			k.expiry(s.Status)+micros(l.ExpiresAt)+s.RunID,
			k.ownerIncarnation(l.Owner)+s.RunID)
	}
	return out
}

// indexChanges returns the index keys to delete and to put when a run's
// (snapshot, lease) changes from old to new (old nil: a new run).
func (k keys) indexChanges(old *storedRun, new storedRun) (del, put []string) {
	next := k.indexKeys(new.Run, new.Lease)
	if old == nil {
		return nil, next
	}
	prev := k.indexKeys(old.Run, old.Lease)
	for _, key := range prev {
		if !slices.Contains(next, key) {
			del = append(del, key)
		}
	}
	for _, key := range next {
		if !slices.Contains(prev, key) {
			put = append(put, key)
		}
	}
	return del, put
}

// runPosAfter is the first key of prefix strictly after the position:
// run ids hold no 0x00, so appending one yields the key's successor.
func runPosAfter(prefix string, p driver.RunPosition) string {
	return prefix + micros(p.CreatedAt) + p.RunID + "\x00"
}

func queuePosAfter(prefix string, p driver.RunnablePosition) string {
	return prefix + invPriority(p.Priority) + micros(p.CreatedAt) + p.RunID + "\x00"
}

// prefixEnd is the first key past every key that starts with prefix.
func prefixEnd(prefix string) string { return clientv3.GetPrefixRangeEnd(prefix) }
