package batch

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The output keys MergeResult owns. An input member under one of these keys
// is dropped: the output's value replaces it.
const (
	KeyCompletion   = "completion"
	KeyFinishReason = "finish_reason"
	KeyError        = "error"
	KeySampleID     = "sample_id"
)

func isOutputKey(name string) bool {
	switch name {
	case KeyCompletion, KeyFinishReason, KeyError, KeySampleID:
		return true
	}
	return false
}

// MergeResult builds one output line (without a trailing newline) for one
// item: the members of the input object verbatim and in their original
// order, then the output members in this fixed order:
//
//   - a done item (errReason == ""): "completion" and, when the result has
//     one, "finish_reason", both taken from result, which must be a JSON
//     object with a "completion" member (else ErrInvalidResult);
//   - a dead item (errReason != ""): "error" with errReason; result is
//     ignored;
//   - always last: "sample_id", the lowercase hex of sampleID.
//
// Input members named completion, finish_reason, error or sample_id are
// dropped, so the output never has duplicate keys and a dead item's line never
// carries a completion. An input that is not a valid input object (see
// ParseLine's rules, "prompt" aside) is an error matching ErrInvalidLine.
func MergeResult(input []byte, sampleID [32]byte, result []byte, errReason string) ([]byte, error) {
	in, err := parseObject(bytes.Trim(input, jsonSpace))
	if err != nil {
		return nil, fmt.Errorf("%w: input: %s", ErrInvalidLine, err.Error())
	}
	return mergeFields(nil, in, len(input), sampleID, result, errReason)
}

// mergeFields appends MergeResult's line of an input already parsed into
// its members (in), inputLen bytes long, to dst (nothing on error).
func mergeFields(dst []byte, in []field, inputLen int, sampleID [32]byte, result []byte, errReason string) ([]byte, error) {
	var add []field
	if errReason != "" {
		add = append(add, field{key: []byte(strconv.Quote(KeyError)), value: jsonString(errReason)})
	} else {
		// The result's members are copied into the line: no copy of it.
		res, err := parseObjectShared(bytes.Trim(result, jsonSpace))
		if err != nil {
			return nil, fmt.Errorf("%w: %s", ErrInvalidResult, err.Error())
		}
		completion := findField(res, KeyCompletion)
		if completion == nil {
			return nil, fmt.Errorf("%w: result has no %q member", ErrInvalidResult, KeyCompletion)
		}
		add = append(add, field{key: []byte(`"` + KeyCompletion + `"`), value: compactJSON(completion)})
		if fr := findField(res, KeyFinishReason); fr != nil {
			add = append(add, field{key: []byte(`"` + KeyFinishReason + `"`), value: compactJSON(fr)})
		}
	}
	add = append(add, field{key: []byte(`"` + KeySampleID + `"`), value: hexString(sampleID[:])})

	size := inputLen + 2
	for _, f := range add {
		size += len(f.key) + len(f.value) + 2
	}
	out := slices.Grow(dst, size)
	out = append(out, '{')
	first := true
	emit := func(f field) {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, f.key...)
		out = append(out, ':')
		out = append(out, f.value...)
	}
	for _, f := range in {
		if !isOutputKey(f.name) {
			emit(f)
		}
	}
	for _, f := range add {
		emit(f)
	}
	out = append(out, '}')
	return out, nil
}

// hexString is the JSON string of b's lowercase hex (which needs no
// escaping): jsonString(hex.EncodeToString(b)) without an encoder.
func hexString(b []byte) json.RawMessage {
	out := make([]byte, 2*len(b)+2)
	out[0], out[len(out)-1] = '"', '"'
	hex.Encode(out[1:], b)
	return out
}

// jsonString encodes s as a JSON string (HTML characters left alone).
func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes; invalid UTF-8 becomes U+FFFD
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// compactJSON removes insignificant whitespace (a result may be
// pretty-printed; an output line must stay one line). v is valid JSON.
func compactJSON(v json.RawMessage) json.RawMessage {
	// A string is compact whatever it holds (its spaces are its own, and
	// valid JSON has no raw newline or tab inside one); so is a value
	// without white space.
	if len(v) > 0 && v[0] == '"' || !bytes.ContainsAny(v, jsonSpace) {
		return v
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return v
	}
	return b.Bytes()
}

// AtomicWriter writes a file so that readers see either the previous file
// (or none) or the complete new one, never a partial file: it writes a
// temporary file in the destination's directory, and Commit flushes, fsyncs,
// renames it over the destination and fsyncs the directory. Abort (or any
// failed Commit) removes the temporary file. Use it as
//
//	w, err := NewAtomicWriter(path, 0o644)
//	...
//	defer w.Abort() // no-op after a successful Commit
//	... w.Write(...) ...
//	return w.Commit()
//
// A destination that cannot be replaced by a rename is written in place
// instead (InPlace): one that exists and is not a regular file (a named
// pipe, a character device such as a terminal or /dev/null, a socket), and
// a name of a standard stream or an open descriptor (/dev/stdout,
// /dev/stderr, /dev/fd/N, /proc/self/fd/N), whatever it refers to. It is
// opened for appending when NewAtomicWriter is called (a pipe's open waits
// for its reader, as a shell's redirection does); Commit flushes and closes
// it, and Abort closes it: what was written by then stays written (a reader
// of a pipe sees a short output, and the caller's failure says why).
//
// An AtomicWriter is not safe for concurrent use.
type AtomicWriter struct {
	path    string
	perm    os.FileMode
	f       *os.File
	bw      *bufio.Writer
	err     error // first write error
	closed  bool
	inPlace bool
}

// NewAtomicWriter starts writing path; the file gets perm on Commit (a
// destination written in place keeps its own mode).
func NewAtomicWriter(path string, perm os.FileMode) (*AtomicWriter, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty output path", ErrInvalidConfig)
	}
	fi, statErr := os.Stat(path)
	if statErr == nil && fi.IsDir() {
		return nil, fmt.Errorf("batch: output %s is a directory", path)
	}
	if isStreamName(path) || (statErr == nil && !fi.Mode().IsRegular()) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, fmt.Errorf("batch: opening output %s: %w", path, err)
		}
		return &AtomicWriter{path: path, perm: perm, f: f, bw: bufio.NewWriterSize(f, 256<<10), inPlace: true}, nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("batch: creating output %s: %w", path, err)
	}
	return &AtomicWriter{path: path, perm: perm, f: f, bw: bufio.NewWriterSize(f, 256<<10)}, nil
}

// InPlace reports whether the destination is written in place (a pipe, a
// device, a standard stream) rather than replaced atomically.
func (w *AtomicWriter) InPlace() bool { return w.inPlace }

// isStreamName reports whether path names a standard stream or an open
// descriptor, whose directory must never receive a temporary file.
func isStreamName(path string) bool {
	p := filepath.Clean(path)
	switch p {
	case "/dev/stdout", "/dev/stderr":
		return true
	}
	return strings.HasPrefix(p, "/dev/fd/") || strings.HasPrefix(p, "/proc/self/fd/")
}

// Write buffers p for the file. After a write error every later Write and
// Commit fail with it.
func (w *AtomicWriter) Write(p []byte) (int, error) {
	if w.closed {
		return 0, ErrWriterClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.bw.Write(p)
	if err != nil {
		w.err = fmt.Errorf("batch: writing %s: %w", w.f.Name(), err)
	}
	return n, w.err
}

// Commit makes the written bytes the content of the destination path,
// atomically. On any failure the destination is untouched and the temporary
// file is removed.
func (w *AtomicWriter) Commit() error {
	if w.closed {
		return ErrWriterClosed
	}
	w.closed = true
	if w.inPlace {
		return w.commitInPlace()
	}
	tmp := w.f.Name()
	fail := func(err error) error {
		_ = w.f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if w.err != nil {
		return fail(w.err)
	}
	if err := w.bw.Flush(); err != nil {
		return fail(fmt.Errorf("batch: writing %s: %w", tmp, err))
	}
	if err := w.f.Chmod(w.perm); err != nil {
		return fail(fmt.Errorf("batch: chmod %s: %w", tmp, err))
	}
	if err := w.f.Sync(); err != nil {
		return fail(fmt.Errorf("batch: fsync %s: %w", tmp, err))
	}
	if err := w.f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("batch: closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("batch: renaming output into place: %w", err)
	}
	// Make the rename durable. Directories cannot be fsynced everywhere;
	// the file itself is complete either way.
	if d, err := os.Open(filepath.Dir(w.path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// commitInPlace flushes what is buffered to a destination written in place
// and closes it.
func (w *AtomicWriter) commitInPlace() error {
	err := w.err
	if err == nil {
		if ferr := w.bw.Flush(); ferr != nil {
			err = fmt.Errorf("batch: writing %s: %w", w.path, ferr)
		}
	}
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("batch: closing %s: %w", w.path, cerr)
	}
	return err
}

// Abort discards everything not yet written and removes the temporary file
// (a destination written in place is closed; what reached it stays). It is
// a no-op after Commit or a previous Abort.
func (w *AtomicWriter) Abort() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.inPlace {
		return w.f.Close()
	}
	tmp := w.f.Name()
	_ = w.f.Close()
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("batch: removing %s: %w", tmp, err)
	}
	return nil
}
