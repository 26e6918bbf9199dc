package train

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadDigits(t *testing.T) {
	d := testDigits(t)
	require.Equal(t, 1438, d.Train.Len())
	require.Equal(t, 359, d.HeldOut.Len())
	require.Len(t, d.Train.X, 1438*64)
	counts := make([]int, 10)
	for _, ds := range []*Dataset{d.Train, d.HeldOut} {
		for _, v := range ds.X {
			require.True(t, v >= 0 && v <= 1)
		}
		for _, y := range ds.Y {
			counts[y]++
		}
	}
	// The class counts of the digits data set.
	require.Equal(t, []int{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}, counts)
	// The split is fixed: the first held-out sample is line 5 of the file,
	// a 4 whose first pixel row is 0,0,0,1,11,0,0,0.
	require.Equal(t, 4, d.HeldOut.Y[0])
	require.Equal(t, []float32{0, 0, 0, 1. / 16, 11. / 16, 0, 0, 0}, d.HeldOut.Row(0)[:8])
	require.Equal(t, 0, d.Train.Y[0])
}

func TestParseDigitsErrors(t *testing.T) {
	line := strings.Repeat("1,", 64) + "3\n"
	for name, tc := range map[string]struct{ text, want string }{
		"short":      {strings.Repeat(line, 10), "10 samples, want 1797"},
		"long":       {strings.Repeat(line, 1798), "more than 1797 samples"},
		"fields":     {"1,2,3\n", "line 1 has 3 fields, want 65"},
		"pixel":      {strings.Repeat("17,", 64) + "3\n", "line 1 field 1 is \"17\""},
		"label":      {strings.Repeat("1,", 64) + "10\n", "line 1 field 65 is \"10\""},
		"not number": {strings.Repeat("1,", 63) + "x,3\n", "line 1 field 64 is \"x\""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDigits(strings.NewReader(tc.text))
			require.ErrorIs(t, err, ErrNoData)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestLoadDigitsMissingSaysMakeData(t *testing.T) {
	_, err := LoadDigits(t.TempDir())
	require.ErrorIs(t, err, ErrNoData)
	require.ErrorContains(t, err, "make data")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, DigitsFile), []byte("not gzip"), 0o644))
	_, err = LoadDigits(dir)
	require.ErrorIs(t, err, ErrNoData)
	// A gzip of a valid-looking but truncated file names the problem.
	f, err := os.Create(filepath.Join(dir, DigitsFile))
	require.NoError(t, err)
	zw := gzip.NewWriter(f)
	_, _ = zw.Write([]byte(strings.Repeat("0,", 64) + "0\n"))
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	_, err = LoadDigits(dir)
	require.ErrorIs(t, err, ErrNoData)
	require.ErrorContains(t, err, "1 samples, want 1797")
}
