package riverbench

import (
	"fmt"
	"sync"
)

// ledger counts how often each unit (a job or a run) was taken, so that a
// unit taken twice fails the benchmark, and tests can check that every
// unit was taken exactly once.
type ledger[K comparable] struct {
	mu    sync.Mutex
	taken map[K]int
}

func newLedger[K comparable]() *ledger[K] { return &ledger[K]{taken: map[K]int{}} }

// take records unit and fails when it was taken before.
func (l *ledger[K]) take(unit K) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.taken[unit]++
	if l.taken[unit] > 1 {
		return fmt.Errorf("unit %v taken %d times", unit, l.taken[unit])
	}
	return nil
}

// exactlyOnce checks that the units taken are exactly want, each once.
func (l *ledger[K]) exactlyOnce(want []K) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.taken) != len(want) {
		return fmt.Errorf("%d distinct units taken, want %d", len(l.taken), len(want))
	}
	for _, unit := range want {
		if n := l.taken[unit]; n != 1 {
			return fmt.Errorf("unit %v taken %d times, want once", unit, n)
		}
	}
	return nil
}
