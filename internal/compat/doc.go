// Package compat is the compatibility matrix: conformance-runner hosts,
// store plugins and gateways of earlier commits of this repository, built
// from its git history, certified against today's and today's against
// them. Each cell's outcome (certified, a named fallback, a named refusal,
// a rule skipped for a named lack) is the one its test expects; a rule
// that fails without a named reason fails the test (docs/plugins.md,
// "Versions that meet"). The package holds that test, and the building
// of its earlier releases, which internal/cmd/prebuild does ahead of it
// on a new machine.
package compat
