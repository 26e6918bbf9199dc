package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"lukechampine.com/blake3"
)

// Floor is the machine's own limit for the payload stage's input, measured
// in the same run on the same file: what reading it, hashing it with blake3
// and writing it costs with nothing of rollout in the way (a
// `cat`/`sha256sum`-style floor). Every payload figure is also given as a
// share of ReadHashWriteMBPerS.
type Floor struct {
	Bytes int64 `json:"bytes"`
	// Passes is how many times each in-process loop ran; the figures are
	// the best pass (the machine's limit, not its average under load).
	Passes int `json:"passes"`
	// In-process loops over the file with a 1 MiB buffer: read only; read
	// and blake3 (the library the store uses); read, blake3 and write to a
	// new file in the stage's directory (no fsync, as cat).
	ReadMBPerS          float64 `json:"read_mb_per_s"`
	ReadHashMBPerS      float64 `json:"read_hash_mb_per_s"`
	ReadHashWriteMBPerS float64 `json:"read_hash_write_mb_per_s"`
	// Commands are the machine's own tools on the same file, those found
	// on PATH (cat FILE > OUT, b3sum FILE, sha256sum FILE); Missing names
	// those that were not.
	Commands []FloorCommand `json:"commands,omitempty"`
	Missing  []string       `json:"missing_commands,omitempty"`
}

// FloorCommand is one external command's pass over the file.
type FloorCommand struct {
	Name    string  `json:"name"`
	Command string  `json:"command"`
	S       float64 `json:"s"`
	MBPerS  float64 `json:"mb_per_s"`
}

// errEmptyFloorInput: the floor was asked of an empty file; its rates
// would be meaningless.
var errEmptyFloorInput = errors.New("floor: empty input file")

// floorBufSize is the read/write buffer of the in-process loops.
const floorBufSize = 1 << 20

// floorCommands are the external commands timed, in order: the name looked
// up on PATH and the form shown in the results.
func floorCommands() []struct{ name, form string } {
	return []struct{ name, form string }{
		{"cat", "cat FILE > OUT"},
		{"b3sum", "b3sum FILE"},
		{"sha256sum", "sha256sum FILE"},
	}
}

// measureFloor measures the floor of input (passes times each loop; at
// least 1), writing its copies into dir (removed afterwards). The returned
// digest is the file's blake3-256, so that a test can check the loop
// hashed every byte.
func measureFloor(ctx context.Context, input, dir string, passes int) (*Floor, [32]byte, error) {
	var sum [32]byte
	fi, err := os.Stat(input)
	if err != nil {
		return nil, sum, err
	}
	if fi.Size() == 0 {
		return nil, sum, fmt.Errorf("%w: %s", errEmptyFloorInput, input)
	}
	passes = max(passes, 1)
	f := &Floor{Bytes: fi.Size(), Passes: passes}
	out := filepath.Join(dir, "floor-copy")
	defer os.Remove(out)
	buf := make([]byte, floorBufSize)
	for _, loop := range []struct {
		rate        *float64
		hash, write bool
	}{{&f.ReadMBPerS, false, false}, {&f.ReadHashMBPerS, true, false}, {&f.ReadHashWriteMBPerS, true, true}} {
		best := time.Duration(0)
		for i := 0; i < passes; i++ {
			if err := ctx.Err(); err != nil {
				return nil, sum, err
			}
			w := ""
			if loop.write {
				w = out
			}
			d, s, err := floorPass(input, w, loop.hash, buf)
			if err != nil {
				return nil, sum, err
			}
			if loop.hash {
				sum = s
			}
			if best == 0 || d < best {
				best = d
			}
		}
		*loop.rate = mbPerS(f.Bytes, best)
	}
	for _, c := range floorCommands() {
		path, err := exec.LookPath(c.name)
		if err != nil {
			f.Missing = append(f.Missing, c.name)
			continue
		}
		d, err := floorCommand(ctx, path, input, out, c.name == "cat")
		if err != nil {
			return nil, sum, fmt.Errorf("floor: %s: %w", c.form, err)
		}
		f.Commands = append(f.Commands, FloorCommand{Name: c.name, Command: c.form, S: d.Seconds(), MBPerS: mbPerS(f.Bytes, d)})
	}
	return f, sum, nil
}

// floorPass reads input once with buf, hashing it with blake3 when hash is
// set and writing it to out when out is not empty, and returns how long
// that took and the digest (zero without hash).
func floorPass(input, out string, hash bool, buf []byte) (time.Duration, [32]byte, error) {
	var sum [32]byte
	start := time.Now()
	in, err := os.Open(input)
	if err != nil {
		return 0, sum, err
	}
	defer in.Close()
	var w *os.File
	if out != "" {
		if w, err = os.Create(out); err != nil {
			return 0, sum, err
		}
		defer w.Close()
	}
	h := blake3.New(32, nil)
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			if hash {
				h.Write(buf[:n])
			}
			if w != nil {
				if _, err := w.Write(buf[:n]); err != nil {
					return 0, sum, err
				}
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return 0, sum, rerr
		}
	}
	if w != nil {
		if err := w.Close(); err != nil {
			return 0, sum, err
		}
	}
	d := time.Since(start)
	if hash {
		copy(sum[:], h.Sum(nil))
	}
	return d, sum, nil
}

// floorCommand times one run of the command at path over input: its
// standard output goes to out when toFile is set (cat FILE > OUT), else
// nowhere.
func floorCommand(ctx context.Context, path, input, out string, toFile bool) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, path, input)
	if toFile {
		w, err := os.Create(out)
		if err != nil {
			return 0, err
		}
		defer w.Close()
		cmd.Stdout = w
	}
	cmd.SysProcAttr = childAttr()
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func mbPerS(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// share is mbs as a share of the floor's read+hash+write rate (0 without
// a floor).
func (f *Floor) share(mbs float64) float64 {
	if f == nil || f.ReadHashWriteMBPerS <= 0 {
		return 0
	}
	return mbs / f.ReadHashWriteMBPerS
}

// floorTargetShare: `rollout submit` alone and `rollout results` alone
// should each reach half the floor (issue 41).
const floorTargetShare = 0.5
