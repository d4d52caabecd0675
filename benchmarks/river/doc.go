// Package riverbench measures runstate beside River
// (github.com/riverqueue/river), the Go job queue on PostgreSQL, on the
// same server in one run, with identical workloads: enqueue, claims, and
// enqueue-then-work end to end. Everything is in the tests and benchmarks
// of this package:
//
//	go test -run '^$' -bench . -count 3 -timeout 60m
//
// It is a module of its own so that runstate's own go.mod never depends on
// River. The server comes from RUNSTATE_POSTGRES_DSN, by default
// postgres://postgres@127.0.0.1:5432/test; every benchmark run gets a
// fresh database on it, dropped afterwards. docs/performance.md, "Beside
// River", says what each metric means.
package riverbench
