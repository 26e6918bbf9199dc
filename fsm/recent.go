package fsm

// RecentRuns returns the status of the newest n runs (by creation, oldest of
// them first) and how many runs the ledger holds. It reads under the
// ledger's read lock for O(n), whatever the number of runs, so a metrics
// scrape can call it without holding up Apply for long. n <= 0 returns no
// runs.
func (l *Ledger) RecentRuns(n int) (recent []RunStatus, total int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	total = len(l.st.runOrder)
	n = min(max(n, 0), total)
	recent = make([]RunStatus, 0, n)
	for _, r := range l.st.runOrder[total-n:] {
		recent = append(recent, r.status())
	}
	return recent, total
}
