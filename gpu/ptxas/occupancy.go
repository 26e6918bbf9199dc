package ptxas

import (
	"fmt"
	"strings"
)

// Arch is one GPU architecture's per-SM limits, from NVIDIA's CUDA C++
// Programming Guide ("Features and Technical Specifications", compute
// capabilities 8.0, 8.6, 8.9 and 9.0) and the rules of its occupancy
// calculator (cuda_occupancy.h).
type Arch struct {
	Name           string // ptxas's -arch, e.g. "sm_80"
	GPUs           string // examples, for the documentation
	MaxWarps       int    // resident warps per SM
	MaxBlocks      int    // resident blocks per SM
	Registers      int    // 32-bit registers per SM
	SharedPerSM    int    // shared memory per SM at the largest carveout, bytes
	MaxSharedBlock int    // shared memory one block may use after opting in, bytes
}

// Rules common to the architectures here.
const (
	WarpSize          = 32
	MaxRegsPerThread  = 255
	RegAllocUnit      = 256       // registers are given to warps in units of 256
	SubPartitions     = 4         // each SM's register file is split over 4 schedulers
	SharedAllocUnit   = 128       // shared memory is given to blocks in units of 128 bytes
	SharedReserved    = 1024      // bytes of shared memory the system reserves per block (8.x, 9.0)
	DefaultSharedSize = 48 * 1024 // the most shared memory a block gets without opting in
)

// Archs are the architectures make gpu-check assembles for.
var Archs = []Arch{
	{Name: "sm_80", GPUs: "A100, A30", MaxWarps: 64, MaxBlocks: 32, Registers: 65536, SharedPerSM: 164 * 1024, MaxSharedBlock: 163 * 1024},
	{Name: "sm_86", GPUs: "A10, A40, RTX 30xx", MaxWarps: 48, MaxBlocks: 16, Registers: 65536, SharedPerSM: 100 * 1024, MaxSharedBlock: 99 * 1024},
	{Name: "sm_89", GPUs: "L4, L40S, RTX 40xx", MaxWarps: 48, MaxBlocks: 24, Registers: 65536, SharedPerSM: 100 * 1024, MaxSharedBlock: 99 * 1024},
	{Name: "sm_90", GPUs: "H100, H200", MaxWarps: 64, MaxBlocks: 32, Registers: 65536, SharedPerSM: 228 * 1024, MaxSharedBlock: 227 * 1024},
}

// Occupancy is a kernel's theoretical occupancy on one architecture for
// one launch configuration.
type Occupancy struct {
	BlocksPerSM int     // resident blocks per SM
	WarpsPerSM  int     // resident warps per SM
	Fraction    float64 // WarpsPerSM / the architecture's MaxWarps
	Limiter     string  // what bounds BlocksPerSM: "warps", "blocks", "registers", "shared memory" (joined by "+" when several do)
}

func roundUp(x, unit int) int { return (x + unit - 1) / unit * unit }

// Theoretical computes the occupancy of a kernel using regs registers per
// thread and shared bytes of shared memory per block (static plus dynamic),
// launched in blocks of threads threads, on a. It is an error when such a
// block cannot run at all (too many registers or too much shared memory for
// one block, or more than 1024 threads).
func Theoretical(a Arch, threads, regs, shared int) (Occupancy, error) {
	if threads < 1 || threads > 1024 {
		return Occupancy{}, fmt.Errorf("%s: %d threads per block: want 1..1024", a.Name, threads)
	}
	if regs < 0 || regs > MaxRegsPerThread {
		return Occupancy{}, fmt.Errorf("%s: %d registers per thread: at most %d", a.Name, regs, MaxRegsPerThread)
	}
	if shared < 0 || shared > DefaultSharedSize {
		return Occupancy{}, fmt.Errorf("%s: %d bytes of shared memory per block: at most %d without opting in", a.Name, shared, DefaultSharedSize)
	}
	warps := (threads + WarpSize - 1) / WarpSize
	limits := []struct {
		name   string
		blocks int
	}{
		{"warps", a.MaxWarps / warps},
		{"blocks", a.MaxBlocks},
	}
	if regs > 0 {
		perWarp := roundUp(regs*WarpSize, RegAllocUnit)
		// The hardware checks a block's registers as if its warps were
		// spread evenly over the sub-partitions.
		if perWarp*roundUp(warps, SubPartitions) > a.Registers {
			return Occupancy{}, fmt.Errorf("%s: a block of %d threads at %d registers needs more than the SM's %d registers", a.Name, threads, regs, a.Registers)
		}
		warpsPerSub := a.Registers / SubPartitions / perWarp
		limits = append(limits, struct {
			name   string
			blocks int
		}{"registers", warpsPerSub * SubPartitions / warps})
	}
	perBlock := roundUp(shared+SharedReserved, SharedAllocUnit)
	limits = append(limits, struct {
		name   string
		blocks int
	}{"shared memory", a.SharedPerSM / perBlock})

	best := limits[0].blocks
	for _, l := range limits[1:] {
		best = min(best, l.blocks)
	}
	var names []string
	for _, l := range limits {
		if l.blocks == best {
			names = append(names, l.name)
		}
	}
	o := Occupancy{BlocksPerSM: best, WarpsPerSM: best * warps, Limiter: strings.Join(names, "+")}
	o.Fraction = float64(o.WarpsPerSM) / float64(a.MaxWarps)
	if best == 0 {
		return o, fmt.Errorf("%s: no block of %d threads at %d registers and %d bytes of shared memory fits on an SM (%s)", a.Name, threads, regs, shared, o.Limiter)
	}
	return o, nil
}
