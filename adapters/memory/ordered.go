package memory

import (
	"iter"
	"slices"
)

// maxChunk is the most keys one chunk of an ordered set holds. A write
// moves at most this many keys within a chunk, and a split or an emptied
// chunk moves the chunk list, so no write moves every key of the store.
const maxChunk = 128

// ordered is a set of keys in the order cmp defines: a list of sorted
// chunks, each non-empty, every key of a chunk before every key of the
// next. Finding a key is two binary searches (the chunk, then the key in
// it), so a read starts where its range starts and walks only what it
// reads.
type ordered[K any] struct {
	cmp    func(a, b K) int
	chunks [][]K
}

func newOrdered[K any](cmp func(a, b K) int) *ordered[K] { return &ordered[K]{cmp: cmp} }

// seek returns the chunk and the index in it of the first key not before
// k; the chunk is len(o.chunks) when every key is before k.
func (o *ordered[K]) seek(k K) (chunk, at int) {
	chunk, _ = slices.BinarySearchFunc(o.chunks, k, func(c []K, k K) int { return o.cmp(c[len(c)-1], k) })
	if chunk < len(o.chunks) {
		at, _ = slices.BinarySearchFunc(o.chunks[chunk], k, o.cmp)
	}
	return chunk, at
}

// insert adds k; a key already present is kept once.
func (o *ordered[K]) insert(k K) {
	if len(o.chunks) == 0 {
		o.chunks = [][]K{{k}}
		return
	}
	chunk, at := o.seek(k)
	if chunk == len(o.chunks) { // after every key: the end of the last chunk
		chunk--
		at = len(o.chunks[chunk])
	} else if o.cmp(o.chunks[chunk][at], k) == 0 {
		return
	}
	c := slices.Insert(o.chunks[chunk], at, k)
	if len(c) > maxChunk {
		half := len(c) / 2
		o.chunks = slices.Insert(o.chunks, chunk+1, slices.Clone(c[half:]))
		c = c[:half:half]
	}
	o.chunks[chunk] = c
}

// delete removes k, if present.
func (o *ordered[K]) delete(k K) {
	chunk, at := o.seek(k)
	if chunk == len(o.chunks) || o.cmp(o.chunks[chunk][at], k) != 0 {
		return
	}
	if c := slices.Delete(o.chunks[chunk], at, at+1); len(c) > 0 {
		o.chunks[chunk] = c
	} else {
		o.chunks = slices.Delete(o.chunks, chunk, chunk+1)
	}
}

// from yields, in order, every key not before *k, or every key when k is
// nil.
func (o *ordered[K]) from(k *K) iter.Seq[K] {
	return func(yield func(K) bool) {
		chunk, at := 0, 0
		if k != nil {
			chunk, at = o.seek(*k)
		}
		o.walk(chunk, at, yield)
	}
}

func (o *ordered[K]) walk(chunk, at int, yield func(K) bool) {
	for ; chunk < len(o.chunks); chunk, at = chunk+1, 0 {
		for _, k := range o.chunks[chunk][at:] {
			if !yield(k) {
				return
			}
		}
	}
}
