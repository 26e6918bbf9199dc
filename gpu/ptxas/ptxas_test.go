package ptxas_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu/kernels"
	"github.com/rollout/rollout/gpu/ptxas"
)

// TestParse reads real ptxas 11.8 output: the GEMM as committed before it
// was reworked (it spilled on sm_80), and the element-wise kernels on sm_90.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		file, arch string
		want       []ptxas.Usage
	}{
		{"testdata/gemm-spills-sm_80.txt", "sm_80", []ptxas.Usage{
			{Kernel: "rl_gemm", Arch: "sm_80", Registers: 128, Shared: 8192, Stack: 64, SpillStores: 64, SpillLoads: 64},
		}},
		{"testdata/ops-sm_90.txt", "sm_90", []ptxas.Usage{
			{Kernel: "rl_sgd", Arch: "sm_90", Registers: 10},
			{Kernel: "rl_col_sum", Arch: "sm_90", Registers: 32},
			{Kernel: "rl_softmax_xent", Arch: "sm_90", Registers: 26},
			{Kernel: "rl_check_labels", Arch: "sm_90", Registers: 10},
			{Kernel: "rl_act_grad", Arch: "sm_90", Registers: 10},
			{Kernel: "rl_bias_act", Arch: "sm_90", Registers: 15},
		}},
	} {
		out, err := os.ReadFile(c.file)
		require.NoError(t, err)
		got, err := ptxas.Parse(c.arch, out)
		require.NoError(t, err, c.file)
		require.Equal(t, c.want, got, c.file)
	}
	require.True(t, ptxas.Usage{SpillStores: 1}.Spills())
	require.True(t, ptxas.Usage{Stack: 8}.Spills())
	require.True(t, ptxas.Usage{Local: 4}.Spills())
	require.False(t, ptxas.Usage{Registers: 255, Shared: 48 * 1024}.Spills())
}

func TestParseRefuses(t *testing.T) {
	const entry = "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
	for _, c := range []struct{ name, out, want string }{
		{"usage before any entry", "ptxas info    : Used 10 registers, 376 bytes cmem[0]\n", "no entry"},
		{"entry without usage", entry, "no \"Used"},
		{"other architecture", "ptxas info    : Compiling entry function 'k' for 'sm_90'\n", "asked for sm_80"},
		{"frame for no function", entry + "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n", "no function"},
		{"huge number", entry + "ptxas info    : Used 99999999999999999999999 registers\n", "number"},
	} {
		_, err := ptxas.Parse("sm_80", []byte(c.out))
		require.ErrorIs(t, err, ptxas.ErrParse, c.name)
		require.ErrorContains(t, err, c.want, c.name)
	}
	got, err := ptxas.Parse("sm_80", []byte(entry+"ptxas info    : Used 12 registers, 64 bytes lmem, 1024 bytes smem, 2 bytes newthing\n"))
	require.NoError(t, err)
	require.Equal(t, []ptxas.Usage{{Kernel: "k", Arch: "sm_80", Registers: 12, Shared: 1024, Local: 64}}, got)
	got, err = ptxas.Parse("sm_80", nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// FuzzParse: no input makes Parse panic, and what it accepts is one usage
// per entry, for the asked architecture.
func FuzzParse(f *testing.F) {
	for _, file := range []string{"testdata/gemm-spills-sm_80.txt", "testdata/ops-sm_90.txt"} {
		b, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("ptxas info    : Compiling entry function 'k' for 'sm_80'\nptxas info    : Used 1 registers\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		for _, arch := range []string{"sm_80", "sm_90"} {
			us, err := ptxas.Parse(arch, out)
			if err != nil {
				continue
			}
			for _, u := range us {
				if u.Arch != arch || u.Kernel == "" || u.Registers < 0 {
					t.Fatalf("%s: %+v", arch, u)
				}
			}
		}
	})
}

func TestTheoretical(t *testing.T) {
	arch := map[string]ptxas.Arch{}
	for _, a := range ptxas.Archs {
		arch[a.Name] = a
	}
	for _, c := range []struct {
		arch                  string
		threads, regs, shared int
		blocks, warps         int
		fraction              float64
		limiter               string
	}{
		// The GEMM: 128 registers allow 4 warps per sub-partition, 16 per SM.
		{"sm_80", 256, 128, 16896, 2, 16, 0.25, "registers"},
		{"sm_86", 256, 128, 16896, 2, 16, 16.0 / 48, "registers"},
		{"sm_90", 256, 128, 16896, 2, 16, 0.25, "registers"},
		// A light kernel fills the SM's warps.
		{"sm_80", 256, 10, 0, 8, 64, 1, "warps"},
		// 37 registers round up to 40 (1280 per warp): 12 warps per
		// sub-partition, 48 per SM, as many as the SM holds.
		{"sm_89", 256, 37, 0, 6, 48, 1, "warps+registers"},
		// 40 registers (1280 per warp): 12 warps per sub-partition, 48 per SM.
		{"sm_80", 256, 40, 0, 6, 48, 0.75, "registers"},
		// Small blocks hit the block limit; shared memory can be the limit.
		{"sm_86", 32, 8, 0, 16, 16, 16.0 / 48, "blocks"},
		{"sm_86", 128, 16, 40 * 1024, 2, 8, 8.0 / 48, "shared memory"},
		// Shared memory is given out in 128-byte units plus 1 KB per block:
		// 41000 bytes take 42112, 3 blocks in 164 KB (4 without the 1 KB).
		{"sm_80", 64, 16, 41000, 3, 6, 6.0 / 64, "shared memory"},
	} {
		o, err := ptxas.Theoretical(arch[c.arch], c.threads, c.regs, c.shared)
		require.NoError(t, err, "%+v", c)
		require.Equal(t, ptxas.Occupancy{BlocksPerSM: c.blocks, WarpsPerSM: c.warps, Fraction: c.fraction, Limiter: c.limiter}, o, "%+v", c)
	}
	for _, c := range []struct {
		threads, regs, shared int
		want                  string
	}{
		{1025, 10, 0, "threads"},
		{0, 10, 0, "threads"},
		{256, 256, 0, "registers per thread"},
		{256, 10, 48*1024 + 1, "without opting in"},
		{1024, 255, 0, "needs more than"},
	} {
		_, err := ptxas.Theoretical(arch["sm_80"], c.threads, c.regs, c.shared)
		require.ErrorContains(t, err, c.want, "%+v", c)
	}
}

// ptxasOrSkip returns NVIDIA's ptxas, or skips saying why (a failure when
// GPU_CHECK_REQUIRE=1, as make gpu-check sets it once it has fetched one).
func ptxasOrSkip(t *testing.T) string {
	t.Helper()
	path, err := ptxas.Find()
	if err != nil {
		if os.Getenv("GPU_CHECK_REQUIRE") == "1" {
			t.Fatalf("GPU_CHECK_REQUIRE=1: %v", err)
		}
		t.Skipf("environment: NVIDIA's ptxas is not here, so the PTX is not assembled: %v", err)
	}
	return path
}

// TestCommittedPTXAssemblesWithoutSpills assembles every committed PTX
// module with NVIDIA's ptxas for every architecture of Archs: every kernel
// is there, none spills or has a stack frame, and each one's launch fits.
func TestCommittedPTXAssemblesWithoutSpills(t *testing.T) {
	path := ptxasOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, a := range ptxas.Archs {
		seen := map[string]ptxas.Usage{}
		for module := range kernels.Modules {
			us, err := ptxas.Assemble(ctx, path, a.Name, kernels.PTX(module))
			require.NoError(t, err, "%s %s", module, a.Name)
			for _, u := range us {
				seen[u.Kernel] = u
			}
		}
		require.Len(t, seen, len(kernels.All), a.Name)
		for _, k := range kernels.All {
			u, ok := seen[k.Name]
			require.True(t, ok, "%s: ptxas compiled no %s", a.Name, k.Name)
			require.False(t, u.Spills(), "%s on %s uses local memory: %+v", k.Name, a.Name, u)
			_, err := ptxas.Theoretical(a, k.Threads, u.Registers, u.Shared+k.Shared)
			require.NoError(t, err, k.Name)
		}
	}
}

// TestAssembleReportsPTXASErrors: a PTX image ptxas refuses is an error
// carrying ptxas's reason.
func TestAssembleReportsPTXASErrors(t *testing.T) {
	path := ptxasOrSkip(t)
	_, err := ptxas.Assemble(context.Background(), path, "sm_80", []byte("not ptx\x00"))
	require.ErrorContains(t, err, ".version")
	v, err := ptxas.Version(context.Background(), path)
	require.NoError(t, err)
	require.Contains(t, v, "cuda_")
}

func TestFind(t *testing.T) {
	t.Setenv(ptxas.PathEnv, t.TempDir())
	_, err := ptxas.Find()
	require.ErrorContains(t, err, "not an executable")
	t.Setenv(ptxas.PathEnv, "/nonexistent/ptxas")
	_, err = ptxas.Find()
	require.ErrorContains(t, err, "make gpu-check")
}
