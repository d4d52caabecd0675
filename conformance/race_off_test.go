//go:build !race

package conformance_test

const raceDetector = false
