package kernels_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rollout/rollout/gpu/kernels"
)

// ClangFlags are `make ptx`'s flags (keep the two in step: the test below
// fails when the committed PTX is not what these flags produce).
var clangFlags = []string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib", "-O2", "-S"}

var (
	entryRE = regexp.MustCompile(`^\.visible \.entry (\w+)\($`)
	paramRE = regexp.MustCompile(`^\t\.param (\.\w+) (\w+)_param_(\d+),?$`)
)

// entries parses a PTX image's kernel entry points and their parameter types.
func entries(t *testing.T, ptx string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(ptx))
	var cur string
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimRight(line[:i], " \t")
		}
		if m := entryRE.FindStringSubmatch(line); m != nil {
			cur = m[1]
			out[cur] = []string{}
			continue
		}
		if cur == "" {
			continue
		}
		if m := paramRE.FindStringSubmatch(line); m != nil {
			if m[2] != cur {
				t.Fatalf("entry %s: parameter of %s", cur, m[2])
			}
			out[cur] = append(out[cur], m[1])
			continue
		}
		if line == ")" {
			cur = ""
			continue
		}
		t.Fatalf("entry %s: unexpected line in parameter list: %q", cur, line)
	}
	return out
}

func TestPTXEntriesMatchLaunchSignatures(t *testing.T) {
	for module := range kernels.Modules {
		ptx := strings.TrimSuffix(string(kernels.PTX(module)), "\x00")
		got := entries(t, ptx)
		want := map[string]bool{}
		for _, k := range kernels.All {
			if k.Module != module {
				continue
			}
			want[k.Name] = true
			params, ok := got[k.Name]
			if !ok {
				t.Errorf("%s: no .entry %s in the PTX", module, k.Name)
				continue
			}
			var sig []string
			for _, p := range k.Params {
				sig = append(sig, p.String())
			}
			if strings.Join(params, ",") != strings.Join(sig, ",") {
				t.Errorf("%s: PTX parameters %v, Go launch signature %v", k.Name, params, sig)
			}
		}
		for name := range got {
			if !want[name] {
				t.Errorf("%s: .entry %s has no Go launch signature", module, name)
			}
		}
	}
}

// TestEntryParserSeesAChangedSignature: the parser the test above relies on
// reports a parameter whose type changed, and one that was added.
func TestEntryParserSeesAChangedSignature(t *testing.T) {
	ptx := strings.TrimSuffix(string(kernels.PTX(kernels.ModuleGemm)), "\x00")
	orig := entries(t, ptx)["rl_gemm_nn"]
	changed := entries(t, strings.Replace(ptx, ".param .u64 rl_gemm_nn_param_4", ".param .u32 rl_gemm_nn_param_4", 1))["rl_gemm_nn"]
	added := entries(t, strings.Replace(ptx, "\t.param .u64 rl_gemm_nn_param_7\n", "\t.param .u64 rl_gemm_nn_param_7,\n\t.param .u32 rl_gemm_nn_param_8\n", 1))["rl_gemm_nn"]
	if len(orig) != len(kernels.GemmNN.Params) || orig[4] != ".u64" || changed[4] != ".u32" || len(added) != len(orig)+1 {
		t.Fatalf("parser: orig %v, changed %v, added %v", orig, changed, added)
	}
}

func TestPTXImagesAreNULTerminatedAndSelfContained(t *testing.T) {
	for module := range kernels.Modules {
		img := kernels.PTX(module)
		if len(img) < 2 || img[len(img)-1] != 0 || bytes.IndexByte(img[:len(img)-1], 0) >= 0 {
			t.Fatalf("%s: image must end with its only NUL byte", module)
		}
		if !bytes.Contains(img, []byte("\n.target sm_80\n")) || !bytes.Contains(img, []byte("\n.version 7.0\n")) {
			t.Errorf("%s: PTX is not ISA 7.0 for sm_80", module)
		}
		for i, line := range strings.Split(string(img), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || strings.HasPrefix(f[0], "//") {
				continue
			}
			// Dynamic shared memory is declared `.extern .shared`; anything
			// else external (a .func from libdevice, a global) the driver
			// cannot resolve.
			if f[0] == ".extern" && (len(f) < 2 || f[1] != ".shared") {
				t.Errorf("%s:%d: external declaration: %s", module, i+1, line)
			}
			if f[0] == "call" || strings.HasPrefix(f[0], "call.") || f[0] == ".func" || f[0] == ".weak" {
				t.Errorf("%s:%d: function call or declaration: %s", module, i+1, line)
			}
		}
		if a := kernels.PTX(module); &a[0] == &img[0] {
			t.Fatal("PTX must return a fresh copy")
		}
	}
	if kernels.PTX("nope") != nil {
		t.Fatal("unknown module must give nil")
	}
}

// TestCommittedPTXIsFresh: where clang-19 is installed, compiling the
// sources gives the committed PTX byte for byte.
func TestCommittedPTXIsFresh(t *testing.T) {
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		t.Skip("environment: clang-19 is not installed (make ptx installs it): the committed PTX is not re-checked")
	}
	dir := t.TempDir()
	ents, err := kernels.Sources.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := kernels.Sources.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for module, file := range kernels.Modules {
		src := strings.TrimSuffix(file, ".ptx") + ".cu"
		out := filepath.Join(dir, file)
		cmd := exec.Command(clang, append(clangFlags, "-o", out, src)...)
		cmd.Dir = dir
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: clang-19: %v\n%s", src, err, msg)
		}
		fresh, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		committed := kernels.PTX(module)
		if !bytes.Equal(append(fresh, 0), committed) {
			t.Errorf("%s: committed %s differs from a fresh compile of %s: run make ptx", module, file, src)
		}
	}
}

func TestGemmForPicksEachTranspose(t *testing.T) {
	for _, c := range []struct {
		math   kernels.GemmMath
		ta, tb bool
		want   string
	}{
		{kernels.GemmFP32, false, false, "rl_gemm_nn"}, {kernels.GemmFP32, false, true, "rl_gemm_nt"},
		{kernels.GemmFP32, true, false, "rl_gemm_tn"}, {kernels.GemmFP32, true, true, "rl_gemm_tt"},
		{kernels.GemmTF32, false, false, "rl_gemm_tf32_nn"}, {kernels.GemmTF32, false, true, "rl_gemm_tf32_nt"},
		{kernels.GemmTF32, true, false, "rl_gemm_tf32_tn"}, {kernels.GemmTF32, true, true, "rl_gemm_tf32_tt"},
	} {
		if got := kernels.GemmFor(c.math, c.ta, c.tb).Name; got != c.want {
			t.Errorf("GemmFor(%v, %v, %v) = %s, want %s", c.math, c.ta, c.tb, got, c.want)
		}
	}
}
