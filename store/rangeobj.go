package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"

	"lukechampine.com/blake3"
)

// Range objects: the data-plane formats of a range run (the ledger's
// ranges, fsm/ranges.go). The ledger holds one reference per input chunk
// and one per result object; everything per item lives in these objects.
//
// # Range chunks
//
// A range chunk is an input chunk that carries its own line index, so that
// a worker reads the lines [i, j) of a chunk with two ranged reads (the
// offsets, then the lines) and never the whole chunk:
//
//	line 0 '\n' line 1 '\n' … line n-1 '\n' | off[0] … off[n] (big-endian uint64)
//
// off[k] is where line k starts; off[n] is the length of the lines part,
// the dataLen the ledger's reference records (NewRange.payload_ref.length).
// Line k is chunk[off[k] : off[k+1]-1]. The chunk is content-addressed as a
// whole (PutContent), so the same lines give the same chunk and key.
//
// # Range result objects
//
// A worker writes one result object per progress report of a range:
//
//	result 0 | result 1 | … | result m-1
//	| m records of (index uint64, length uint32, sample id [32]byte, blake3 [32]byte)
//	| m uint64 | "RRS1"
//
// records are in strictly ascending index order, each result's bytes
// follow the previous one's, and blake3 is the hash of that result's bytes.
// The ledger records the object's key and the blake3 of the whole object.

// ErrBadRangeObject: bytes that are not a valid range chunk or range result
// object (truncated, a bad table, a hash that does not match).
var ErrBadRangeObject = errors.New("invalid range object")

// RangeResultsMagic ends every range result object.
const RangeResultsMagic = "RRS1"

const (
	rangeRecordBytes = 8 + 4 + 32 + 32
	rangeFooterBytes = 8 + len(RangeResultsMagic)
)

// RangeChunk builds range chunks: Add the lines, then Bytes. The zero value
// is ready to use.
type RangeChunk struct {
	data []byte
	offs []uint64
}

// Add appends a line (without its '\n').
func (c *RangeChunk) Add(line []byte) {
	c.offs = append(c.offs, uint64(len(c.data)))
	c.data = append(c.data, line...)
	c.data = append(c.data, '\n')
}

// Lines is how many lines the chunk holds.
func (c *RangeChunk) Lines() int { return len(c.offs) }

// DataLen is the length of the lines part (what the ledger's reference
// records).
func (c *RangeChunk) DataLen() int { return len(c.data) }

// Size is the chunk's size with its index.
func (c *RangeChunk) Size() int { return len(c.data) + 8*(len(c.offs)+1) }

// Bytes returns the chunk with its line index appended.
func (c *RangeChunk) Bytes() []byte {
	out := make([]byte, 0, c.Size())
	out = append(out, c.data...)
	for _, o := range c.offs {
		out = binary.BigEndian.AppendUint64(out, o)
	}
	return binary.BigEndian.AppendUint64(out, uint64(len(c.data)))
}

// Take returns what Bytes returns, built in the chunk's own buffer (no
// copy of the lines), and empties the chunk: its next lines go into a new
// buffer of the same capacity (the returned bytes are the caller's).
func (c *RangeChunk) Take() []byte {
	out := c.data
	for _, o := range c.offs {
		out = binary.BigEndian.AppendUint64(out, o)
	}
	out = binary.BigEndian.AppendUint64(out, uint64(len(c.data)))
	c.data = make([]byte, 0, cap(out))
	c.offs = c.offs[:0]
	return out
}

// Reset empties the chunk, keeping its buffers.
func (c *RangeChunk) Reset() {
	c.data = c.data[:0]
	c.offs = c.offs[:0]
}

// RangeReader reads a byte range of an object (Store.ReadRange).
type RangeReader interface {
	ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error)
}

// ReadChunkLines reads lines [first, first+n) of the range chunk key whose
// lines part is dataLen bytes, with two ranged reads. The lines are
// returned without their '\n' and share one buffer. An index that does not
// fit the chunk (offsets out of order or past dataLen, a line not ending in
// '\n' or holding one) is ErrBadRangeObject naming the chunk; a read
// shorter than asked for is ErrShortObject.
func ReadChunkLines(ctx context.Context, r RangeReader, key string, dataLen, first, n uint64) ([][]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if first > math.MaxInt64/16 || n > math.MaxInt64/16 || dataLen > math.MaxInt64/2 {
		return nil, fmt.Errorf("%w: chunk %s: lines [%d, +%d) out of range", ErrBadRangeObject, key, first, n)
	}
	idx, err := r.ReadRange(ctx, key, int64(dataLen+8*first), int64(8*(n+1)))
	if err != nil {
		return nil, fmt.Errorf("reading the line index of chunk %s: %w", key, err)
	}
	if uint64(len(idx)) != 8*(n+1) {
		return nil, fmt.Errorf("%w: chunk %s: the line index of lines [%d, +%d) is %d bytes, want %d", ErrShortObject, key, first, n, len(idx), 8*(n+1))
	}
	offs := make([]uint64, n+1)
	for k := range offs {
		offs[k] = binary.BigEndian.Uint64(idx[8*k:])
		if offs[k] > dataLen || (k > 0 && offs[k] <= offs[k-1]) {
			return nil, fmt.Errorf("%w: chunk %s: line offset %d of line %d is out of order or past %d", ErrBadRangeObject, key, offs[k], first+uint64(k), dataLen)
		}
	}
	data, err := r.ReadRange(ctx, key, int64(offs[0]), int64(offs[n]-offs[0]))
	if err != nil {
		return nil, fmt.Errorf("reading lines [%d, +%d) of chunk %s: %w", first, n, key, err)
	}
	if uint64(len(data)) != offs[n]-offs[0] {
		return nil, fmt.Errorf("%w: chunk %s: lines [%d, +%d) are %d bytes, want %d", ErrShortObject, key, first, n, len(data), offs[n]-offs[0])
	}
	lines := make([][]byte, n)
	for k := range lines {
		a, b := offs[k]-offs[0], offs[k+1]-offs[0]
		if data[b-1] != '\n' {
			return nil, fmt.Errorf("%w: chunk %s: line %d does not end in a newline", ErrBadRangeObject, key, first+uint64(k))
		}
		if bytes.IndexByte(data[a:b-1], '\n') >= 0 {
			return nil, fmt.Errorf("%w: chunk %s: line %d holds a newline: the line index does not match the lines", ErrBadRangeObject, key, first+uint64(k))
		}
		lines[k] = data[a : b-1 : b-1]
	}
	return lines, nil
}

// KeySum returns the blake3 a content-addressed key names (its last
// segment is 64 lowercase hex digits, as PutContent makes it), and whether
// it names one.
func KeySum(key string) (Sum, bool) {
	var sum Sum
	seg := key[strings.LastIndexByte(key, '/')+1:]
	if len(seg) != 2*len(sum) || strings.ToLower(seg) != seg {
		return sum, false
	}
	if _, err := hex.Decode(sum[:], []byte(seg)); err != nil {
		return sum, false
	}
	return sum, true
}

// CheckRangeChunk reads the whole range chunk key, whose lines part is
// dataLen bytes, and checks that it is the chunk that was recorded: its
// lines part ends in a newline, its line index holds exactly the start of
// every line and dataLen (else ErrBadRangeObject naming the chunk and the
// first line that differs), and, when sum is not nil, the blake3 of the
// lines and the index is *sum (else ErrHashMismatch naming the chunk). A
// chunk shorter than its lines and index is ErrShortObject from r. It
// returns how many lines the chunk holds. It reads dataLen bytes and the
// index: call it once per chunk, then read lines with ReadChunkLines (or
// keep the checked bytes: LoadRangeChunk).
func CheckRangeChunk(ctx context.Context, r RangeReader, key string, dataLen uint64, sum *Sum) (uint64, error) {
	c, err := LoadRangeChunk(ctx, r, key, dataLen, sum)
	if err != nil {
		return 0, err
	}
	return uint64(c.Lines()), nil
}

// CheckedChunk is a range chunk read whole and checked (LoadRangeChunk):
// its lines are served from exactly the bytes that were checked, so a chunk
// changed after its check cannot feed a line that was not submitted.
type CheckedChunk struct {
	data []byte // the lines part
	idx  []byte // the line index: lines+1 big-endian offsets
}

// Lines is how many lines the chunk holds.
func (c *CheckedChunk) Lines() int { return len(c.idx)/8 - 1 }

// Size is the chunk's size in bytes, its line index included.
func (c *CheckedChunk) Size() int { return len(c.data) + len(c.idx) }

// Line returns line k (without its '\n'), sharing the chunk's memory (it
// must not be modified); k past the last line is ErrBadRangeObject.
func (c *CheckedChunk) Line(k uint64) ([]byte, error) {
	if k >= uint64(c.Lines()) {
		return nil, fmt.Errorf("%w: line %d asked of a chunk of %d lines", ErrBadRangeObject, k, c.Lines())
	}
	a := binary.BigEndian.Uint64(c.idx[8*k:])
	b := binary.BigEndian.Uint64(c.idx[8*k+8:]) - 1
	return c.data[a:b:b], nil
}

// LoadRangeChunk reads the whole range chunk key, whose lines part is
// dataLen bytes, with two ranged reads (the lines, then the index), checks
// it as CheckRangeChunk does (same errors) in one pass over its bytes and
// one blake3, and returns it.
func LoadRangeChunk(ctx context.Context, r RangeReader, key string, dataLen uint64, sum *Sum) (*CheckedChunk, error) {
	if dataLen == 0 || dataLen > math.MaxInt64/16 {
		return nil, fmt.Errorf("%w: chunk %s: a lines part of %d bytes", ErrBadRangeObject, key, dataLen)
	}
	data, err := r.ReadRange(ctx, key, 0, int64(dataLen))
	if err != nil {
		return nil, fmt.Errorf("reading the lines of chunk %s: %w", key, err)
	}
	if uint64(len(data)) != dataLen {
		return nil, fmt.Errorf("%w: chunk %s: its lines are %d bytes, want %d", ErrShortObject, key, len(data), dataLen)
	}
	if data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: chunk %s: its lines part (%d bytes) does not end in a newline", ErrBadRangeObject, key, dataLen)
	}
	lines := uint64(bytes.Count(data, []byte{'\n'}))
	idx, err := r.ReadRange(ctx, key, int64(dataLen), int64(8*(lines+1)))
	if err != nil {
		return nil, fmt.Errorf("reading the line index of chunk %s (%d lines): %w", key, lines, err)
	}
	if uint64(len(idx)) != 8*(lines+1) {
		return nil, fmt.Errorf("%w: chunk %s: its line index is %d bytes, want %d", ErrShortObject, key, len(idx), 8*(lines+1))
	}
	start := uint64(0)
	for k := uint64(0); k <= lines; k++ {
		if got := binary.BigEndian.Uint64(idx[8*k:]); got != start {
			return nil, fmt.Errorf("%w: chunk %s: the line index says line %d starts at %d, it starts at %d", ErrBadRangeObject, key, k, got, start)
		}
		if k < lines {
			start += uint64(bytes.IndexByte(data[start:], '\n')) + 1
		}
	}
	if sum != nil {
		h := blake3.New(len(sum), nil)
		_, _ = h.Write(data)
		_, _ = h.Write(idx)
		var got Sum
		h.Sum(got[:0])
		if got != *sum {
			return nil, fmt.Errorf("%w: chunk %s (%d lines, %d bytes) is not the chunk recorded: blake3 %x, want %x",
				ErrHashMismatch, key, lines, len(data)+len(idx), got, *sum)
		}
	}
	return &CheckedChunk{data: data, idx: idx}, nil
}

// RangeResult is one item's result in a range result object.
type RangeResult struct {
	Index    uint64
	SampleID [32]byte
	Result   []byte
}

// EncodeRangeResults builds a range result object. rs must be in strictly
// ascending index order (else ErrBadRangeObject), each result under 4 GiB.
func EncodeRangeResults(rs []RangeResult) ([]byte, error) {
	size := rangeFooterBytes + rangeRecordBytes*len(rs)
	for i, r := range rs {
		if i > 0 && r.Index <= rs[i-1].Index {
			return nil, fmt.Errorf("%w: index %d after %d", ErrBadRangeObject, r.Index, rs[i-1].Index)
		}
		if uint64(len(r.Result)) > math.MaxUint32 {
			return nil, fmt.Errorf("%w: result of index %d is %d bytes", ErrBadRangeObject, r.Index, len(r.Result))
		}
		size += len(r.Result)
	}
	out := make([]byte, 0, size)
	for _, r := range rs {
		out = append(out, r.Result...)
	}
	for _, r := range rs {
		out = binary.BigEndian.AppendUint64(out, r.Index)
		out = binary.BigEndian.AppendUint32(out, uint32(len(r.Result)))
		out = append(out, r.SampleID[:]...)
		sum := Hash(r.Result)
		out = append(out, sum[:]...)
	}
	out = binary.BigEndian.AppendUint64(out, uint64(len(rs)))
	return append(out, RangeResultsMagic...), nil
}

// DecodeRangeResults parses and checks a range result object: its footer,
// its table (ascending indexes, lengths that add up to the results part)
// and every result's blake3. The results share b's memory.
func DecodeRangeResults(b []byte) ([]RangeResult, error) { return decodeRangeResults(b, true) }

// DecodeRangeResultsHashed is DecodeRangeResults of an object whose whole
// blake3 the caller has checked against the one the ledger recorded: the
// same checks but the blake3 of each result, whose bytes that hash already
// covers (the data path hashes each byte once).
func DecodeRangeResultsHashed(b []byte) ([]RangeResult, error) { return decodeRangeResults(b, false) }

func decodeRangeResults(b []byte, hashEach bool) ([]RangeResult, error) {
	if len(b) < rangeFooterBytes || !bytes.Equal(b[len(b)-len(RangeResultsMagic):], []byte(RangeResultsMagic)) {
		return nil, fmt.Errorf("%w: %d bytes without the %q footer", ErrBadRangeObject, len(b), RangeResultsMagic)
	}
	m := binary.BigEndian.Uint64(b[len(b)-rangeFooterBytes:])
	rest := uint64(len(b) - rangeFooterBytes)
	if m > rest/rangeRecordBytes {
		return nil, fmt.Errorf("%w: %d records do not fit in %d bytes", ErrBadRangeObject, m, rest)
	}
	table := b[rest-m*rangeRecordBytes : rest]
	data := b[:rest-m*rangeRecordBytes]
	out := make([]RangeResult, m)
	pos := uint64(0)
	for k := range out {
		rec := table[k*rangeRecordBytes:]
		r := &out[k]
		r.Index = binary.BigEndian.Uint64(rec)
		n := uint64(binary.BigEndian.Uint32(rec[8:]))
		copy(r.SampleID[:], rec[12:44])
		if k > 0 && r.Index <= out[k-1].Index {
			return nil, fmt.Errorf("%w: record %d has index %d after %d", ErrBadRangeObject, k, r.Index, out[k-1].Index)
		}
		if n > uint64(len(data))-pos {
			return nil, fmt.Errorf("%w: record %d (index %d) has %d bytes, %d left", ErrBadRangeObject, k, r.Index, n, uint64(len(data))-pos)
		}
		r.Result = data[pos : pos+n : pos+n]
		pos += n
		if !hashEach {
			continue
		}
		if sum := Hash(r.Result); !bytes.Equal(sum[:], rec[44:76]) {
			return nil, fmt.Errorf("%w: the result of index %d does not match its blake3", ErrBadRangeObject, r.Index)
		}
	}
	if pos != uint64(len(data)) {
		return nil, fmt.Errorf("%w: results take %d bytes, the object holds %d", ErrBadRangeObject, pos, len(data))
	}
	return out, nil
}
