// Package ptxas runs NVIDIA's PTX assembler (ptxas, from the CUDA toolkit)
// on rollout's PTX and reads back what it reports for each kernel:
// registers, static shared memory, stack frame and spills. With the
// per-architecture limits in Archs it computes each kernel's theoretical
// occupancy (resident warps per SM over the maximum), the way NVIDIA's
// occupancy calculator does.
//
// ptxas is the backend the driver's JIT uses when it loads PTX, so what it
// reports for an architecture is what that GPU will run, without one: a
// spill here is a spill on the GPU.
package ptxas

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrParse is returned for ptxas output that cannot be read.
var ErrParse = errors.New("ptxas: unreadable output")

// Usage is one kernel's resources as ptxas reports them for one
// architecture.
type Usage struct {
	Kernel      string
	Arch        string // e.g. "sm_80"
	Registers   int    // per thread
	Shared      int    // static shared memory, bytes per block
	Stack       int    // stack frame, bytes per thread
	SpillStores int    // bytes per thread
	SpillLoads  int    // bytes per thread
	Local       int    // local memory (lmem), bytes per thread, when reported
}

// Spills reports whether the kernel touches local memory for anything:
// spills, a stack frame or local arrays.
func (u Usage) Spills() bool {
	return u.SpillStores > 0 || u.SpillLoads > 0 || u.Stack > 0 || u.Local > 0
}

var (
	compilingRE  = regexp.MustCompile(`^ptxas info\s*: Compiling entry function '(\w+)' for '(\w+)'$`)
	propertiesRE = regexp.MustCompile(`^ptxas info\s*: Function properties for (\w+)$`)
	frameRE      = regexp.MustCompile(`^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads$`)
	usedRE       = regexp.MustCompile(`^ptxas info\s*: Used (\d+) registers(?:, (.*))?$`)
	itemRE       = regexp.MustCompile(`^(\d+) bytes (\w+)(?:\[\d+\])?$`)
)

// Parse reads `ptxas -v` output (stderr) for arch into one Usage per entry
// function, in the order ptxas compiled them. Lines it does not know are
// skipped; a usage line for no entry, a number that does not fit an int,
// or an entry with no "Used" line is ErrParse.
func Parse(arch string, out []byte) ([]Usage, error) {
	var (
		res   []Usage
		cur   = -1 // index in res of the entry being compiled
		props = "" // the function whose properties come next
		frame = map[string][3]int{}
		used  = map[int]bool{}
	)
	num := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("%w: number %q: %v", ErrParse, s, err)
		}
		return n, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \r")
		if m := compilingRE.FindStringSubmatch(line); m != nil {
			if m[2] != arch {
				return nil, fmt.Errorf("%w: entry %s compiled for %s, asked for %s", ErrParse, m[1], m[2], arch)
			}
			res = append(res, Usage{Kernel: m[1], Arch: arch})
			cur = len(res) - 1
			continue
		}
		if m := propertiesRE.FindStringSubmatch(line); m != nil {
			props = m[1]
			continue
		}
		if m := frameRE.FindStringSubmatch(line); m != nil {
			if props == "" {
				return nil, fmt.Errorf("%w: stack frame line for no function: %q", ErrParse, line)
			}
			var v [3]int
			for i := range v {
				n, err := num(m[i+1])
				if err != nil {
					return nil, err
				}
				v[i] = n
			}
			frame[props] = v
			props = ""
			continue
		}
		if m := usedRE.FindStringSubmatch(line); m != nil {
			if cur < 0 {
				return nil, fmt.Errorf("%w: usage line for no entry: %q", ErrParse, line)
			}
			u := &res[cur]
			n, err := num(m[1])
			if err != nil {
				return nil, err
			}
			u.Registers = n
			if m[2] != "" {
				for _, item := range strings.Split(m[2], ", ") {
					im := itemRE.FindStringSubmatch(strings.TrimSpace(item))
					if im == nil {
						continue // e.g. a form a newer ptxas adds
					}
					n, err := num(im[1])
					if err != nil {
						return nil, err
					}
					switch im[2] {
					case "smem":
						u.Shared = n
					case "lmem":
						u.Local = n
					}
				}
			}
			used[cur] = true
			continue
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrParse, err)
	}
	for i := range res {
		if !used[i] {
			return nil, fmt.Errorf("%w: entry %s has no \"Used N registers\" line", ErrParse, res[i].Kernel)
		}
		if f, ok := frame[res[i].Kernel]; ok {
			res[i].Stack, res[i].SpillStores, res[i].SpillLoads = f[0], f[1], f[2]
		}
	}
	return res, nil
}

// Assemble runs the ptxas at path on a PTX image (a trailing NUL is
// dropped) for arch, discarding the machine code, and returns each entry's
// usage sorted by kernel name. A ptxas that fails says why in the error.
func Assemble(ctx context.Context, path, arch string, ptx []byte) ([]Usage, error) {
	ptx = bytes.TrimSuffix(ptx, []byte{0})
	dir, err := os.MkdirTemp("", "ptxas-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "in.ptx")
	if err := os.WriteFile(in, ptx, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, "-arch="+arch, "-v", "-o", filepath.Join(dir, "out.cubin"), in)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ptxas -arch=%s: %v: %s", arch, err, strings.TrimSpace(stderr.String()))
	}
	us, err := Parse(arch, stderr.Bytes())
	if err != nil {
		return nil, err
	}
	sort.Slice(us, func(i, j int) bool { return us[i].Kernel < us[j].Kernel })
	return us, nil
}

// Version returns the last line of `ptxas --version` (e.g. "Build
// cuda_11.8.r11.8/compiler.31833905_0").
func Version(ctx context.Context, path string) (string, error) {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("ptxas --version: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// PathEnv names the environment variable that gives ptxas's path.
const PathEnv = "ROLLOUT_PTXAS"

// CacheDir is where `make gpu-check` puts NVIDIA's tools: bin/ptxas and
// lib/libcuda.so.1 under the user's cache directory.
func CacheDir() (string, error) {
	root, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "rollout-nvidia"), nil
}

// Find returns the ptxas to run: PathEnv's when set, else the one `make
// gpu-check` fetched into CacheDir. The error says where it looked.
func Find() (string, error) {
	path := os.Getenv(PathEnv)
	if path == "" {
		dir, err := CacheDir()
		if err != nil {
			return "", fmt.Errorf("ptxas: no cache directory: %v", err)
		}
		path = filepath.Join(dir, "bin", "ptxas")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("ptxas: %v (make gpu-check fetches NVIDIA's ptxas there)", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("ptxas: %s is not an executable file", path)
	}
	return path, nil
}
