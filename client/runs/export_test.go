package runs

// Test windows on the package's internals.

// AheadObjects is how many objects a range run's read-ahead holds at most.
const AheadObjects = aheadObjects

// AheadStats counts what a range run's read-ahead read and held.
type AheadStats struct{ s aheadStats }

// Snapshot returns the objects read and the most objects and bytes held
// at once so far (safe while the walk runs).
func (a *AheadStats) Snapshot() (reads, maxObjects int, maxBytes int64) { return a.s.snapshot() }

// WithAheadStats returns cfg with the read-ahead counted into a.
func WithAheadStats(cfg ResultsConfig, a *AheadStats) ResultsConfig {
	cfg.ahead = &a.s
	return cfg
}
