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

// TestSumMatchesBlake3: every length up to 300 and from 1 to 3 KiB (the
// chunk-by-chunk path and past it), every length around the sizes where blake3's tree
// changes shape (blocks of 64 bytes, chunks of 1 KiB, SIMD buffers of 16
// KiB and their powers of two), and a spread of others up to 1.1 MiB, sums
// as blake3.Sum256 does.
func TestSumMatchesBlake3(t *testing.T) {
	b := input(1100 << 10)
	check := func(n int) {
		t.Helper()
		if got, want := Sum256(b[:n]), blake3.Sum256(b[:n]); got != want {
			t.Fatalf("Sum256 of %d bytes: %x, blake3.Sum256: %x", n, got, want)
		}
	}
	for n := 0; n <= 300; n++ {
		check(n)
	}
	for n := 1025; n <= 3<<10+64; n++ { // each side of smallBytes
		check(n)
	}
	for edge := 1024; edge <= len(b)-2; edge += 1024 {
		for _, n := range []int{edge - 1, edge, edge + 1} {
			check(n)
		}
	}
	for n := 300; n < len(b); n += 997 {
		check(n)
	}
	check(len(b))
}

// FuzzSum: any bytes sum as blake3.Sum256 sums them.
func FuzzSum(f *testing.F) {
	f.Add([]byte("x"))
	f.Add(input(2048))
	f.Add(input(5000))
	f.Add(input(40000))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Sum256(b), blake3.Sum256(b); got != want {
			t.Fatalf("Sum256 of %d bytes: %x, blake3.Sum256: %x", len(b), got, want)
		}
	})
}

// TestSumAllocatesNothing: up to 16 KiB, nothing is allocated (a caller's
// buffer on its stack stays there).
func TestSumAllocatesNothing(t *testing.T) {
	for _, n := range []int{100, 2100, 16 << 10} {
		b := input(n)
		if a := testing.AllocsPerRun(100, func() { Sum256(b) }); a != 0 {
			t.Errorf("Sum256 of %d bytes allocates %v times", n, a)
		}
	}
}

// BenchmarkSum compares Sum256 with blake3.Sum256 on the sizes of a
// sample id's bytes (a 2 KiB prompt), of larger records and of a result
// object.
func BenchmarkSum(b *testing.B) {
	for _, n := range []int{64, 2100, 2304, 2305, 3072, 8 << 10, 1 << 20} {
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
