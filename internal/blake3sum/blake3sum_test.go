package blake3sum

import (
	"fmt"
	"testing"

	"lukechampine.com/blake3"
)

func input(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// TestSumMatchesBlake3: every length from 0 to past 16 KiB (each chunk
// count, chunk boundaries and the bytes around them) sums as
// blake3.Sum256 does.
func TestSumMatchesBlake3(t *testing.T) {
	b := input(17 << 10)
	for n := 0; n <= len(b); n++ {
		if n > 300 && n%1024 > 3 && n%1024 < 1021 && n%97 != 0 {
			continue
		}
		want := blake3.Sum256(b[:n])
		if got := Sum256(b[:n]); got != want {
			t.Fatalf("Sum256 of %d bytes: %x, blake3.Sum256: %x", n, got, want)
		}
	}
}

// FuzzSum: any bytes sum as blake3.Sum256 sums them.
func FuzzSum(f *testing.F) {
	f.Add([]byte("x"))
	f.Add(input(2048))
	f.Add(input(5000))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Sum256(b), blake3.Sum256(b); got != want {
			t.Fatalf("Sum256 of %d bytes: %x, blake3.Sum256: %x", len(b), got, want)
		}
	})
}

// BenchmarkSum compares Sum256 with blake3.Sum256 on the sizes of a
// sample id's bytes (a 2 KiB prompt) and of larger records.
func BenchmarkSum(b *testing.B) {
	for _, n := range []int{2100, 4200, 8 << 10, 16 << 10} {
		in := input(n)
		b.Run(fmt.Sprintf("blake3/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				blake3.Sum256(in)
			}
		})
		b.Run(fmt.Sprintf("Sum256/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				Sum256(in)
			}
		})
	}
}
