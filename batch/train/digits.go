package train

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The digits data set: scikit-learn's copy of the UCI optical recognition
// of handwritten digits test set, 1,797 images of 8×8 pixels with values
// 0..16 and labels 0..9. `make data` takes it from Debian's python3-sklearn
// package (apt-get download + dpkg -x, nothing installed) into the data
// directory as DigitsFile.
const (
	// DigitsFile is the file's name in the data directory: gzipped CSV, one
	// image a line, 64 pixel values then the label, all integers.
	DigitsFile = "digits.csv.gz"
	// DigitsSamples, DigitsFeatures and DigitsClasses are its shape.
	DigitsSamples  = 1797
	DigitsFeatures = 64
	DigitsClasses  = 10
	// digitsMaxPixel is the largest pixel value; features are pixel/16.
	digitsMaxPixel = 16
	// HeldOutEvery: sample i (0-based, file order) is held out iff
	// i%HeldOutEvery == HeldOutEvery-1, so 359 of 1,797 are held out and
	// 1,438 train. The split is fixed: it depends on nothing but the file.
	HeldOutEvery = 5
	// DefaultDataDir is the data directory when the config names none,
	// relative to the config file's directory.
	DefaultDataDir = ".data"
)

// ErrNoData: the data set file is missing (run `make data`) or invalid.
var ErrNoData = errors.New("train: data set unavailable")

// Dataset is a set of labelled samples: X holds len(Y) rows of Features
// float32 values (row-major), Y the labels in [0, Classes).
type Dataset struct {
	Features, Classes int
	X                 []float32
	Y                 []int
}

// Len is the number of samples.
func (d *Dataset) Len() int { return len(d.Y) }

// Row returns sample i's features.
func (d *Dataset) Row(i int) []float32 { return d.X[i*d.Features : (i+1)*d.Features] }

// check reports a data set whose features do not fill its rows or whose
// labels are not below classes (ErrNoData).
func (d *Dataset) check(classes int) error {
	if len(d.X) != d.Len()*d.Features {
		return fmt.Errorf("%w: %d feature values for %d samples of %d features", ErrNoData, len(d.X), d.Len(), d.Features)
	}
	for i, y := range d.Y {
		if y < 0 || y >= classes {
			return fmt.Errorf("%w: label %d of sample %d is not in [0, %d)", ErrNoData, y, i, classes)
		}
	}
	return nil
}

// Digits is the digits data set split into its fixed training and
// held-out parts (see HeldOutEvery).
type Digits struct {
	Train, HeldOut *Dataset
}

// LoadDigits reads DigitsFile from dir and splits it. A missing file is an
// error wrapping ErrNoData that says to run `make data`; a file that is not
// exactly 1,797 lines of 64 integers in [0, 16] and a label in [0, 9] is an
// error wrapping ErrNoData naming the line.
func LoadDigits(dir string) (*Digits, error) {
	path := filepath.Join(dir, DigitsFile)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist (run `make data` to fetch the digits data set)", ErrNoData, path)
		}
		return nil, fmt.Errorf("%w: %v", ErrNoData, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoData, path, err)
	}
	d, err := ParseDigits(io.LimitReader(zr, 1<<22))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// ParseDigits parses the uncompressed CSV of the digits data set (see
// LoadDigits) and splits it.
func ParseDigits(r io.Reader) (*Digits, error) {
	tr := &Dataset{Features: DigitsFeatures, Classes: DigitsClasses}
	ho := &Dataset{Features: DigitsFeatures, Classes: DigitsClasses}
	sc := bufio.NewScanner(r)
	n := 0
	row := make([]float32, DigitsFeatures)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if n == DigitsSamples {
			return nil, fmt.Errorf("%w: more than %d samples (line %d)", ErrNoData, DigitsSamples, n+1)
		}
		n++
		fields := strings.Split(line, ",")
		if len(fields) != DigitsFeatures+1 {
			return nil, fmt.Errorf("%w: line %d has %d fields, want %d", ErrNoData, n, len(fields), DigitsFeatures+1)
		}
		for j, s := range fields {
			v, err := strconv.Atoi(strings.TrimSpace(s))
			max := digitsMaxPixel
			if j == DigitsFeatures {
				max = DigitsClasses - 1
			}
			if err != nil || v < 0 || v > max {
				return nil, fmt.Errorf("%w: line %d field %d is %q, want an integer in [0, %d]", ErrNoData, n, j+1, s, max)
			}
			if j < DigitsFeatures {
				row[j] = float32(v) / digitsMaxPixel
				continue
			}
			d := tr
			if (n-1)%HeldOutEvery == HeldOutEvery-1 {
				d = ho
			}
			d.X = append(d.X, row...)
			d.Y = append(d.Y, v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoData, err)
	}
	if n != DigitsSamples {
		return nil, fmt.Errorf("%w: %d samples, want %d", ErrNoData, n, DigitsSamples)
	}
	return &Digits{Train: tr, HeldOut: ho}, nil
}
