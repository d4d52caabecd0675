//go:build race

package conformance_test

// raceDetector: the race detector instruments every memory access, which
// weighs on code that walks data far more than on I/O, so timings under it
// measure the instrumentation.
const raceDetector = true
