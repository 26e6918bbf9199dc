package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/localcluster"
)

// The data-plane stages (payload, scale-e2e) submit prompts of a given size
// through the CLI with a file store in the stage's directory, run them
// through mock workers and check every result line.

// errWrongResult: a result line is not what the mock backend returns for
// its input line.
var errWrongResult = errors.New("wrong result")

// padding fills prompts to their size (JSON-safe bytes only).
const padding = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_"

// promptOf is the prompt of item i of a data-plane input tagged tag:
// exactly size bytes (at least the "TAG item NNNNNNNNNNNN " header).
func promptOf(tag string, i, size int) string {
	return string(appendPrompt(make([]byte, 0, max(size, len(tag)+19)), tag, i, size))
}

// appendPrompt appends promptOf(tag, i, size) to dst.
func appendPrompt(dst []byte, tag string, i, size int) []byte {
	start := len(dst)
	dst = append(dst, tag...)
	dst = append(dst, " item "...)
	var num [20]byte
	d := strconv.AppendInt(num[:0], int64(i), 10)
	for k := len(d); k < 12; k++ {
		dst = append(dst, '0')
	}
	dst = append(dst, d...)
	dst = append(dst, ' ')
	for len(dst)-start < size {
		n := min(size-(len(dst)-start), len(padding))
		dst = append(dst, padding[:n]...)
	}
	return dst
}

// promptInput writes (once) a JSONL file of the prompts of items
// first..first+n-1 of tag, each {"prompt":P} with P of size bytes, and
// returns its path.
func (b *bench) promptInput(tag string, first, n, size int) (string, error) {
	path := filepath.Join(b.cfg.dir, "inputs", fmt.Sprintf("%s-%d-%d-%dB.jsonl", tag, first, n, size))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(f, 4<<20)
	for i := first; i < first+n; i++ {
		w.WriteString(`{"prompt":"`)
		w.WriteString(promptOf(tag, i, size))
		w.WriteString("\"}\n")
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// resultLine is what a result line of a prompt input holds.
type resultLine struct {
	Prompt       *string         `json:"prompt"`
	Completion   *string         `json:"completion"`
	FinishReason string          `json:"finish_reason"`
	SampleID     string          `json:"sample_id"`
	Error        json.RawMessage `json:"error"`
}

// verifyPromptResults reads the results of the input promptInput(tag,
// first, n, size) wrote, as the demo's verifier checks them: one line per
// input line in input order, each with the input's prompt, the sample id
// of its input line (so no duplicates, none out of place),
// "completion" == "MOCK:"+prompt, finish_reason "stop", no "error" and no
// other member; nothing missing, nothing extra. It returns the number of
// lines checked; the first wrong line is an error (errWrongResult).
func verifyPromptResults(r io.Reader, tag string, first, n, size int) (int, error) {
	br := bufio.NewReaderSize(r, 4<<20)
	sampling := batch.DefaultSamplingParams()
	var prompt, want []byte
	for j := 0; ; j++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: the rest of it, copied.
			var rest []byte
			rest, err = br.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if errors.Is(err, io.EOF) {
				if j != n {
					return j, fmt.Errorf("%w: %d result lines, want %d", errWrongResult, j, n)
				}
				return j, nil
			}
			if err != nil {
				return j, err
			}
			j-- // a blank line is not a result
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return j, err
		}
		if j >= n {
			return j, fmt.Errorf("%w: extra result line %d: the input has %d lines", errWrongResult, j+1, n)
		}
		// The fast path: the line is byte for byte what the CLI writes
		// for the item. Anything else (another layout of the same
		// members, or a wrong line) takes checkPromptResult, which
		// accepts the former and names what is wrong with the latter.
		prompt = appendPrompt(prompt[:0], tag, first+j, size)
		id := batch.SampleID("", string(prompt), sampling, uint64(j))
		want = appendResultLine(want[:0], prompt, id)
		if bytes.Equal(bytes.TrimSuffix(line, []byte("\n")), want) {
			continue
		}
		if err := checkPromptResult(line, string(prompt), uint64(j), sampling); err != nil {
			return j, fmt.Errorf("%w: result line %d: %v", errWrongResult, j+1, err)
		}
	}
}

// appendResultLine appends the result line the CLI writes for a prompt
// line of the mock backend, without its newline:
// {"prompt":P,"completion":"MOCK:P","finish_reason":"stop","sample_id":ID}.
// The prompt must be of padding's JSON-safe bytes (promptOf's), which need
// no escaping.
func appendResultLine(dst, prompt []byte, id [32]byte) []byte {
	dst = append(dst, `{"prompt":"`...)
	dst = append(dst, prompt...)
	dst = append(dst, `","completion":"MOCK:`...)
	dst = append(dst, prompt...)
	dst = append(dst, `","finish_reason":"stop","sample_id":"`...)
	dst = hex.AppendEncode(dst, id[:])
	return append(dst, `"}`...)
}

func checkPromptResult(line []byte, prompt string, index uint64, sampling batch.SamplingParams) error {
	var got resultLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		return fmt.Errorf("not a result object of a prompt line: %v", err)
	}
	id := batch.SampleID("", prompt, sampling, index)
	switch {
	case len(got.Error) > 0:
		return fmt.Errorf("item is dead: %s", got.Error)
	case got.SampleID != hex.EncodeToString(id[:]):
		return fmt.Errorf("sample_id %s is not that of input line %d: out of order or wrong", got.SampleID, index+1)
	case got.Prompt == nil || *got.Prompt != prompt:
		return fmt.Errorf("prompt is not that of input line %d", index+1)
	case got.Completion == nil || *got.Completion != "MOCK:"+prompt:
		return errors.New(`completion is not "MOCK:"+prompt`)
	case got.FinishReason != "stop":
		return fmt.Errorf("finish_reason %q, want stop", got.FinishReason)
	}
	return nil
}

// runCLIStream runs the rollout CLI like runCLI, handing its standard
// output to consume as it comes (the CLI's standard error is kept for the
// error message).
func (b *bench) runCLIStream(ctx context.Context, cl *localcluster.Cluster, consume func(io.Reader) error, args ...string) (cliResult, error) {
	argv := []string{args[0], "--coord", cl.CoordFlag()}
	argv = append(argv, cl.TLSArgs("cli")...)
	argv = append(argv, args[1:]...)
	argv = append(argv, b.layoutArgs(args[0])...)
	cmd := exec.CommandContext(ctx, filepath.Join(b.cfg.bin, "rollout"), argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return cliResult{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return cliResult{}, err
	}
	cerr := consume(out)
	if cerr != nil {
		// Stop the CLI rather than block it on a full pipe.
		io.Copy(io.Discard, out)
	}
	err = cmd.Wait()
	r := cliResult{Wall: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		r.CPU = ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		tail := stderr.Bytes()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return r, errors.Join(cerr, fmt.Errorf("rollout %v: %w\n%s", args, err, tail))
	}
	return r, cerr
}

// DirSize is the size of a directory tree: the files' lengths, and the
// disk they take (allocated blocks).
type DirSize struct {
	Bytes     int64 `json:"bytes"`
	DiskBytes int64 `json:"disk_bytes"`
}

func dirSize(dir string) (DirSize, error) {
	var s DirSize
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // a snapshot removed meanwhile
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		s.Bytes += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s.DiskBytes += st.Blocks * 512
		}
		return nil
	})
	return s, err
}

// ReplicaMem is a replica's memory and disk at the end of a data-plane run.
type ReplicaMem struct {
	ID      string `json:"id"`
	Leader  bool   `json:"leader"`
	PeakRSS int64  `json:"peak_rss_bytes"`
	RSS     int64  `json:"rss_bytes"`
	// RSSAnon and RSSFile split RSS: the heap and stacks, and file pages
	// mapped (bbolt maps raft.db, so its pages read or written count).
	RSSAnon int64   `json:"rss_anon_bytes"`
	RSSFile int64   `json:"rss_file_bytes"`
	DataDir DirSize `json:"data_dir"`
	RaftDB  int64   `json:"raft_db_bytes"`
}

// replicaMems reads every running replica's peak and current RSS and its
// data directory.
func replicaMems(cl *localcluster.Cluster, leaderID string) ([]ReplicaMem, error) {
	var out []ReplicaMem
	for _, r := range cl.Replicas {
		m := ReplicaMem{ID: r.ID, Leader: r.ID == leaderID}
		var err error
		if m.PeakRSS, err = procPeakRSS(r.Pid()); err != nil {
			return nil, fmt.Errorf("%s: %w", r.ID, err)
		}
		m.RSS, _ = procRSS(r.Pid())
		m.RSSAnon, _ = procStatusKB(r.Pid(), "RssAnon:")
		m.RSSFile, _ = procStatusKB(r.Pid(), "RssFile:")
		if m.DataDir, err = dirSize(r.DataDir); err != nil {
			return nil, fmt.Errorf("%s: %w", r.ID, err)
		}
		if fi, err := os.Stat(filepath.Join(r.DataDir, "raft.db")); err == nil {
			m.RaftDB = fi.Size()
		}
		out = append(out, m)
	}
	return out, nil
}

// metricValue reads the sum of a Prometheus histogram or the value of a
// counter (name, without labels) from a replica's /metrics.
func metricValue(ctx context.Context, addr, name string) (float64, error) {
	if addr == "" {
		return 0, errors.New("the replica has no --metrics-addr")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no metric %s", addr, name)
}

// logCommandBytes sums raftBatchBytes over every replica: each counts what
// it handed to Raft while it led, so the sum is what every leader of the
// run appended (as long as no replica restarted).
func logCommandBytes(ctx context.Context, cl *localcluster.Cluster) (float64, error) {
	var sum float64
	for _, r := range cl.Replicas {
		v, err := metricValue(ctx, r.MetricsAddr, raftBatchBytes)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", r.ID, err)
		}
		sum += v
	}
	return sum, nil
}

// raftBatchBytes is the leader's histogram of the bytes of commands it
// handed to Raft per log entry: its sum is the command bytes appended to
// the log by this leader.
const raftBatchBytes = "rollout_raft_batch_bytes_sum"

// freeDisk returns the bytes free for an unprivileged user on dir's file
// system.
func freeDisk(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
