// Package blake3sum computes the blake3-256 sum of a byte slice: exactly
// blake3.Sum256 (lukechampine.com/blake3), without that function's costs
// on the data path: on an input of 2 to 16 chunks (1 KiB each) it starts
// a goroutine per subtree and copies the input into a fresh 16 KiB buffer,
// and on any input over one chunk the input escapes to the heap (so does a
// caller's buffer on its stack). Sample ids of 2 KiB prompts and the
// results of range result objects are hashed one by one: this is their
// hash. It hashes on the calling goroutine, 16 chunks at a time with the
// library's SIMD compression (guts.CompressBuffer), and merges the
// chaining values as blake3's tree does.
package blake3sum

import (
	"lukechampine.com/blake3/guts"
)

// blockBytes is what one SIMD compression takes: 16 chunks.
const blockBytes = guts.MaxSIMD * guts.ChunkSize

// smallBytes is the longest input hashed chunk by chunk without SIMD: the
// SIMD compression costs 16 chunks' work (and a 16 KiB copy) whatever the
// input, which on the data path's 2 KiB inputs (two chunks and a few
// blocks) is about 40% more than compressing their chunks one at a time;
// at three whole chunks the SIMD one is cheaper (BenchmarkSum measures
// both sides of this bound).
const smallBytes = 2*guts.ChunkSize + 4*guts.BlockSize

// Sum256 returns the blake3-256 sum of b, the same 32 bytes as
// blake3.Sum256(b). b does not escape; an input of at most 16 KiB is
// hashed without allocating.
func Sum256(b []byte) [32]byte {
	var root guts.Node
	switch {
	case len(b) <= guts.ChunkSize:
		root = guts.CompressChunk(b, &guts.IV, 0, 0)
	case len(b) <= smallBytes:
		root = small(b)
	case len(b) <= blockBytes:
		root = tail(b, 0)
	default:
		root = large(b)
	}
	root.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(root))
	var sum [32]byte
	copy(sum[:], out[:])
	return sum
}

// small is the root node (its root flag not set) of 2 or 3 chunks (1 KiB
// < len(b) <= smallBytes, the third at most 4 blocks), each compressed on its own: two chunks' parent,
// or the parent of the first two's parent and the third (a tree splits at
// the largest power of two below its chunk count).
func small(b []byte) guts.Node {
	left := guts.ChainingValue(guts.CompressChunk(b[:guts.ChunkSize], &guts.IV, 0, 0))
	right := guts.ChainingValue(guts.CompressChunk(b[guts.ChunkSize:min(len(b), 2*guts.ChunkSize)], &guts.IV, 1, 0))
	if len(b) <= 2*guts.ChunkSize {
		return guts.ParentNode(left, right, &guts.IV, 0)
	}
	pair := guts.ChainingValue(guts.ParentNode(left, right, &guts.IV, 0))
	third := guts.ChainingValue(guts.CompressChunk(b[2*guts.ChunkSize:], &guts.IV, 2, 0))
	return guts.ParentNode(pair, third, &guts.IV, 0)
}

// tail compresses 2 to 16 chunks (1 KiB < len(b) <= 16 KiB), the first
// of them chunk number counter, into the node of their subtree, from a
// copy on the stack (the compression reads 16 whole chunks).
func tail(b []byte, counter uint64) guts.Node {
	var buf [blockBytes]byte
	copy(buf[:], b)
	return guts.CompressBuffer(&buf, len(b), &guts.IV, counter, 0)
}

// large is the root node (its root flag not set) of more than 16 chunks:
// each whole 16 chunks in place, the rest (tail), then their chaining
// values merged pairwise, level by level, an odd last one carried up: the
// left-complete tree blake3 defines, whose subtrees of 16 chunks are these
// (a tree over n chunks splits at the largest power of two below n, a
// multiple of 16 here).
func large(b []byte) guts.Node {
	n := (len(b) + blockBytes - 1) / blockBytes
	var stack [64][8]uint32
	cvs := stack[:0]
	if n > len(stack) {
		cvs = make([][8]uint32, 0, n)
	}
	for off := 0; off < len(b); off += blockBytes {
		var node guts.Node
		counter := uint64(off / guts.ChunkSize)
		switch rest := len(b) - off; {
		case rest >= blockBytes:
			node = guts.CompressBuffer((*[blockBytes]byte)(b[off:off+blockBytes]), blockBytes, &guts.IV, counter, 0)
		case rest <= guts.ChunkSize:
			node = guts.CompressChunk(b[off:], &guts.IV, counter, 0)
		default:
			node = tail(b[off:], counter)
		}
		cvs = append(cvs, guts.ChainingValue(node))
	}
	for len(cvs) > 2 {
		half := len(cvs) / 2
		for i := range half {
			cvs[i] = guts.ChainingValue(guts.ParentNode(cvs[2*i], cvs[2*i+1], &guts.IV, 0))
		}
		if len(cvs)%2 != 0 {
			cvs[half] = cvs[len(cvs)-1]
			half++
		}
		cvs = cvs[:half]
	}
	return guts.ParentNode(cvs[0], cvs[1], &guts.IV, 0)
}
