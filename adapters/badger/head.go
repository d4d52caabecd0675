package badger

import (
	"bytes"
	"slices"
	"sync"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate/adapters/internal/kvindex"
)

// queueHead lets claim-order scans start past the deletion markers that
// claimed runs leave at the head of the q index (Badger keeps them until
// compaction, and skipping them one by one made each claim cost as much as
// all claims since). For each q prefix it keeps start: no live key of the
// prefix sorts before it. This holds because one process owns the directory
// and every q insert goes through tx.setIndex:
//   - a transaction that inserts a q key lowers start before it commits,
//     and holds inserting (shared) from then until it has committed;
//   - advance raises start while holding inserting exclusively, so no
//     insert is in flight, and reads what is committed;
//   - scanners read start inside their transaction, after its read
//     timestamp is fixed, so every insert their snapshot holds has lowered it.
type queueHead struct {
	inserting sync.RWMutex

	mu    sync.Mutex
	start map[string][]byte
}

// seek returns where a scan of prefix may start.
func (h *queueHead) seek(prefix []byte) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k, ok := h.start[string(prefix)]; ok {
		return k
	}
	return prefix
}

func (h *queueHead) lower(prefix, k []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.start[string(prefix)]; ok && bytes.Compare(k, cur) < 0 {
		h.start[string(prefix)] = slices.Clone(k)
	}
}

// advance moves start of prefix to the first live key at or after it.
func (h *queueHead) advance(db *bdb.DB, prefix []byte) {
	h.inserting.Lock()
	defer h.inserting.Unlock()
	from := h.seek(prefix)
	// With no live key left, the end of the prefix range will do: the next
	// insert lowers it. prefix ends in 0x00, so 0x01 in its place is past it.
	first := append(prefix[:len(prefix)-1:len(prefix)-1], 1)
	err := db.View(func(txn *bdb.Txn) error {
		it := txn.NewIterator(bdb.IteratorOptions{Prefix: prefix})
		defer it.Close()
		if it.Seek(from); it.Valid() {
			first = it.Item().KeyCopy(nil)
		}
		return nil
	})
	if err != nil {
		return // start stays where it was, which is still correct
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.start[string(prefix)] = first
}

// queuePrefixOf returns the q prefix (tag, 0, status, 0) of a q index key.
func queuePrefixOf(k []byte) []byte {
	return k[:2+bytes.IndexByte(k[2:], 0)+1]
}

// tx is a read-write transaction of one Store call, across its retries.
type tx struct {
	*bdb.Txn
	head      *queueHead
	inserting bool // holds head.inserting shared
	// written are the runs the transaction writes, whose watchers its
	// commit wakes (RunWatcher); runnable says a write made a run
	// claimable without a lease, which wakes idle workers
	// (RunnableWatcher).
	written  []string
	runnable bool
	// parked is the earliest wake time of a run the transaction parked.
	parked time.Time
}

// setIndex writes an index key, keeping the queue head correct.
func (t *tx) setIndex(k []byte) error {
	if k[0] == kvindex.TagQueue {
		if !t.inserting {
			t.head.inserting.RLock()
			t.inserting = true
		}
		t.head.lower(queuePrefixOf(k), k)
	}
	return t.Set(k, nil)
}

func (t *tx) done() {
	if t.inserting {
		t.head.inserting.RUnlock()
		t.inserting = false
	}
}
