package runstate_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
)

// Recover lives in this package; the conformance suite on the reference
// store is its test. Mutation testing of this package relies on it.
func TestConformanceOfTheReferenceStore(t *testing.T) {
	conformance.Run(t, memorytest.Target(true))
}
