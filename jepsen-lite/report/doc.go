// Package report writes a jepsen-lite run's report: summary.md (tables of
// the settings, operations, faults, leader changes, failover times and
// checker verdicts) and summary.json (the same data, for tools and tests).
package report
