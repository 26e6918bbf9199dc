package worker

// ReporterWakeups is how many times w's reporter woke (tests only).
func ReporterWakeups(w *Worker) uint64 { return w.wakeups.Load() }

// ClaimPaused reports whether w's claimer holds off because its
// unreported results passed MaxUnreportedBytes (tests only).
func ClaimPaused(w *Worker) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.claimPaused
}

// ReporterIdle reports whether w's reporter sleeps without a timer (tests
// only).
func ReporterIdle(w *Worker) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reporterIdle
}

// ChunksCached counts the range chunks w keeps (tests only).
func ChunksCached(w *Worker) int { return w.stores.chunks.cached() }
