package driver_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
)

// The rules every store built on the kit follows are decided in this
// package; the conformance suite on the reference store, which is built on
// it, is their test. Mutation testing of this package relies on it.
func TestConformanceOfTheReferenceStore(t *testing.T) {
	conformance.Run(t, memorytest.Target(true))
}
