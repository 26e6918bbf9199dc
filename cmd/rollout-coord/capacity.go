package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/rollout/rollout/fsm"
)

// fallbackMemory is the memory assumed where it cannot be read (8 GiB).
const fallbackMemory = 8 << 30

// capacity returns the ledger's capacity: the flags where given, else half
// of the machine's memory (the smaller of physical memory and a cgroup
// limit) in bytes and that divided by fsm.ItemBytes in items.
func capacity(items, bytes uint64) (uint64, uint64) {
	if bytes == 0 {
		bytes = machineMemory() / 2
	}
	if items == 0 {
		items = bytes / fsm.ItemBytes
	}
	return items, bytes
}

// machineMemory reads MemTotal from /proc/meminfo and a cgroup v2 or v1
// memory limit, and returns the smaller; fallbackMemory where neither can be
// read (not Linux).
func machineMemory() uint64 {
	mem := uint64(0)
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(fields[1], 10, 64); err == nil {
					mem = kb << 10
				}
			}
		}
		f.Close()
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if lim, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && lim > 0 && (mem == 0 || lim < mem) {
			mem = lim
		}
	}
	if mem == 0 {
		return fallbackMemory
	}
	return mem
}
