package etcd

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/kvindex"
	"github.com/runstate/runstate/driver"
)

// keys is kvindex's layout under Options.Prefix, as the strings etcd's
// client takes. The run key holds the run's snapshot, lease and last audit
// seq together (storedRun): etcd compares one key's revision per run, and
// index keys have empty values.
type keys struct{ l kvindex.Layout }

func newKeys(prefix string) keys { return keys{kvindex.Layout{Prefix: []byte(prefix)}} }

func (k keys) run(id string) string                { return string(k.l.Run(id)) }
func (k keys) meta(name string) string             { return string(k.l.Meta(name)) }
func (k keys) auditPrefix(id string) string        { return string(k.l.AuditPrefix(id)) }
func (k keys) audit(id string, seq int64) string   { return string(k.l.Audit(id, seq)) }
func (k keys) created() string                     { return string(k.l.Created()) }
func (k keys) status(st runstate.RunStatus) string { return string(k.l.Status(st)) }
func (k keys) queue(st runstate.RunStatus) string  { return string(k.l.Queue(st)) }
func (k keys) expiry(st runstate.RunStatus) string { return string(k.l.Expiry(st)) }
func (k keys) parked(st runstate.RunStatus) string { return string(k.l.Parked(st)) }
func (k keys) owner(worker string) string          { return string(k.l.Owner(worker)) }
func (k keys) ownerIncarnation(o runstate.Owner) string {
	return string(k.l.OwnerIncarnation(o))
}

// indexChanges returns the index keys to delete and to put when a run's
// (snapshot, lease) changes from old to new (old nil: a new run).
func (k keys) indexChanges(old *storedRun, new storedRun) (del, put []string) {
	var from *kvindex.Indexed
	if old != nil {
		from = &kvindex.Indexed{Run: old.Run, Lease: old.Lease}
	}
	d, p := k.l.IndexChanges(from, kvindex.Indexed{Run: new.Run, Lease: new.Lease})
	return strs(d), strs(p)
}

// listPrefixes is kvindex.Layout.ListPrefixes.
func (k keys) listPrefixes(f driver.RunFilter) []string { return strs(k.l.ListPrefixes(f)) }

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func micros(t time.Time) string { return string(kvindex.Micros(t)) }

func runPosAfter(prefix string, p driver.RunPosition) string {
	return string(kvindex.RunPosAfter([]byte(prefix), p))
}

func queuePosAfter(prefix string, p driver.RunnablePosition) string {
	return string(kvindex.QueuePosAfter([]byte(prefix), p))
}

// prefixEnd is the first key past every key that starts with prefix.
func prefixEnd(prefix string) string { return clientv3.GetPrefixRangeEnd(prefix) }

func (k keys) prefix() string { return string(k.l.Prefix) }
