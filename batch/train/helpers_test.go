package train

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// testDigits loads the repository's digits (`make data`); without them
// the test is skipped, except under CI=true where it fails.
func testDigits(t *testing.T) *Digits {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
		dir = parent
	}
	d, err := LoadDigits(filepath.Join(dir, DefaultDataDir))
	if errors.Is(err, ErrNoData) && os.Getenv("CI") != "true" {
		t.Skipf("environment: %v (with CI=true this fails)", err)
	}
	require.NoError(t, err)
	return d
}

// fakeDigits is a data set of the digits' shape with synthetic values,
// for tests that do not need the real images.
func fakeDigits() *Digits {
	mk := func(n, off int) *Dataset {
		d := &Dataset{Features: DigitsFeatures, Classes: DigitsClasses}
		for i := range n {
			for j := range DigitsFeatures {
				d.X = append(d.X, float32((i+off+j)%17)/16)
			}
			d.Y = append(d.Y, (i+off)%DigitsClasses)
		}
		return d
	}
	return &Digits{Train: mk(1438, 0), HeldOut: mk(359, 7)}
}

const validConfig = `name = "digits-test"

[model]
hidden = [32]
activation = "relu"

[data]
set = "digits"

[train]
shards = 3
batch_size = 64
steps = 5
learning_rate = 0.5
seed = 7
checkpoint_interval = 2
`

func mustConfig(t *testing.T, text string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(text), "cfg/train.toml")
	require.NoError(t, err)
	return c
}
