// Package blake3sum computes the blake3-256 sum of a byte slice: exactly
// blake3.Sum256 (lukechampine.com/blake3), without that function's cost
// on inputs of a few KiB, where it starts a goroutine per subtree and
// copies an input of 2 to 16 chunks into a fresh 16 KiB buffer. Sample
// ids of 2 KiB prompts and the result records of range result objects
// are hashed one by one on the data path: this is their hash.
package blake3sum

import (
	"lukechampine.com/blake3"
	"lukechampine.com/blake3/guts"
)

// Sum256 returns the blake3-256 sum of b, the same 32 bytes as
// blake3.Sum256(b). It allocates nothing and starts no goroutine for an
// input of at most 16 KiB; a larger one is hashed by blake3.Sum256.
func Sum256(b []byte) [32]byte {
	if len(b) <= guts.ChunkSize || len(b) > guts.MaxSIMD*guts.ChunkSize {
		return blake3.Sum256(b)
	}
	return sumBuffer(b)
}

// sumBuffer hashes 2 to 16 chunks (1 KiB < len(b) <= 16 KiB) as one SIMD
// buffer, the way blake3's hasher compresses such a subtree, on a copy
// that lives on the stack. (Hashing the chunks one after the other and
// merging their chaining values took twice as long on 2 KiB and four
// times as long on 8 KiB: BenchmarkSum.)
func sumBuffer(b []byte) [32]byte {
	var buf [guts.MaxSIMD * guts.ChunkSize]byte
	copy(buf[:], b)
	root := guts.CompressBuffer(&buf, len(b), &guts.IV, 0, 0)
	root.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(root))
	var sum [32]byte
	copy(sum[:], out[:])
	return sum
}
