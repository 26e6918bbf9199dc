package store

import (
	"context"
	"fmt"
)

// DefaultChunkBytes bounds an input chunk (8 MiB): large enough that a
// claim's items share few objects, small enough to upload and retry whole.
const DefaultChunkBytes = 8 << 20

// Chunker packs input lines into content-addressed chunk objects of at most
// a bound, split on line boundaries: each chunk is its lines, each followed
// by '\n', stored under prefix + hex(blake3(chunk)). The same lines give the
// same chunks, so a resubmit or an interrupted submit uploads nothing twice
// (PutContent skips a chunk that is there). A Chunker is not safe for
// concurrent use.
type Chunker struct {
	st     *Store
	prefix string
	max    int
	buf    []byte
	// Uploaded and Reused count the chunks Flush sent and found already
	// stored; Bytes counts the bytes of all chunks.
	Uploaded, Reused int
	Bytes            int64
}

// NewChunker returns a Chunker writing chunks of at most maxBytes under
// prefix.
func NewChunker(st *Store, prefix string, maxBytes int) *Chunker {
	return &Chunker{st: st, prefix: prefix, max: maxBytes}
}

// Fits reports whether a line of n bytes fits in the current chunk (a line
// always fits in an empty one).
func (c *Chunker) Fits(n int) bool { return len(c.buf) == 0 || len(c.buf)+n+1 <= c.max }

// Add appends line to the current chunk and returns its offset there.
func (c *Chunker) Add(line []byte) int64 {
	off := int64(len(c.buf))
	c.buf = append(c.buf, line...)
	c.buf = append(c.buf, '\n')
	return off
}

// Len is the size of the current chunk.
func (c *Chunker) Len() int { return len(c.buf) }

// Flush stores the current chunk, durably, and starts a new one. It returns
// the chunk's key ("" when the chunk was empty).
func (c *Chunker) Flush(ctx context.Context) (string, error) {
	if len(c.buf) == 0 {
		return "", nil
	}
	key, _, uploaded, err := c.st.PutContent(ctx, c.prefix, c.buf)
	if err != nil {
		return "", fmt.Errorf("storing an input chunk of %d bytes: %w", len(c.buf), err)
	}
	if uploaded {
		c.Uploaded++
	} else {
		c.Reused++
	}
	c.Bytes += int64(len(c.buf))
	c.buf = c.buf[:0]
	return key, nil
}
