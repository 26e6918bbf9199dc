package connlimit

import (
	"fmt"
	"syscall"
)

// FileLimit raises the process's soft open-file limit (RLIMIT_NOFILE) to
// its hard limit where the system allows it, and returns the soft limit in
// force afterwards, with whether it was raised. An error means the limit
// could not be read; a refused raise is not an error (the old soft limit
// is returned).
func FileLimit() (soft uint64, raised bool, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, false, fmt.Errorf("connlimit: read the open-file limit: %w", err)
	}
	if r.Cur < r.Max {
		want := r
		want.Cur = r.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
				return want.Cur, true, nil
			}
			return uint64(r.Cur), true, nil
		}
	}
	return uint64(r.Cur), false, nil
}

// Share is a listener's total connection limit out of an open-file limit of
// nofile: nofile*num/den, at least min(16, nofile/4) (a tiny limit still
// leaves room to work), at most 1<<20.
func Share(nofile uint64, num, den int) int {
	if den <= 0 || num <= 0 {
		return 0
	}
	n := nofile * uint64(num) / uint64(den)
	floor := min(16, nofile/4)
	n = max(n, floor)
	return int(min(n, 1<<20))
}
