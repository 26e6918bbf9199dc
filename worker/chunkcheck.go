package worker

import (
	"context"
	"errors"
	"fmt"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
)

// Checking range chunks. A range's lines are read a window at a time
// (store.ReadChunkLines), which cannot tell a chunk whose bytes changed
// after submit from the one recorded. So the first time a worker reads a
// chunk it reads it whole and checks it (store.CheckRangeChunk): its line
// index against its lines, and its blake3 against the one recorded (the
// reference's blake3, else the hash its content-addressed key names). A
// missing, shorter or changed chunk is ErrInputMissing: the range is
// reported held (its run stalls until the chunk is back), never nacked in
// a loop and never run on lines that are not the ones submitted.

// maxCheckedChunks bounds how many checked chunks a worker remembers;
// when full it forgets them all (each is checked again once).
const maxCheckedChunks = 4096

// chunkSum is the blake3 a chunk reference records: its own blake3 when
// set, else the hash its content-addressed key names; nil when neither.
func chunkSum(ref *rolloutv1.DataRef) *store.Sum {
	if b := ref.GetBlake3(); len(b) == len(store.Sum{}) {
		sum := store.Sum(b)
		return &sum
	}
	if sum, ok := store.KeySum(ref.GetObject()); ok {
		return &sum
	}
	return nil
}

// chunkLines returns lines [first, first+n) of the range chunk ref of the
// store url, checking the whole chunk the first time this worker reads
// it. A chunk that is missing, short or not the one recorded is an error
// wrapping ErrData and ErrInputMissing that names the chunk; a store fault
// wraps ErrData only.
func (s *stores) chunkLines(ctx context.Context, url string, ref *rolloutv1.DataRef, first, n uint64) ([][]byte, error) {
	st, err := s.get(ctx, url)
	if err != nil {
		return nil, err
	}
	k := url + "\x00" + ref.GetObject() + "\x00" + fmt.Sprint(ref.GetLength())
	s.mu.Lock()
	_, ok := s.checked[k]
	s.mu.Unlock()
	if !ok {
		if _, err := store.CheckRangeChunk(ctx, st, ref.GetObject(), ref.GetLength(), chunkSum(ref)); err != nil {
			return nil, chunkError(err)
		}
		s.mu.Lock()
		if s.checked == nil || len(s.checked) >= maxCheckedChunks {
			s.checked = make(map[string]struct{})
		}
		s.checked[k] = struct{}{}
		s.mu.Unlock()
	}
	lines, err := store.ReadChunkLines(ctx, st, ref.GetObject(), ref.GetLength(), first, n)
	if err != nil {
		return nil, chunkError(err)
	}
	return lines, nil
}

// chunkError wraps an error reading a range chunk: ErrInputMissing beside
// ErrData when the chunk is missing or not the one recorded.
func chunkError(err error) error {
	if inputMissing(err) || errors.Is(err, store.ErrBadRangeObject) {
		return fmt.Errorf("%w: %w: %w", ErrData, ErrInputMissing, err)
	}
	return fmt.Errorf("%w: %w", ErrData, err)
}
