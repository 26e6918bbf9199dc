//go:build !linux

package exec

import (
	"context"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// reaper does nothing on this system: it has no child subreaper, so a
// process a program started that leaves its process group is its own to
// end.
type reaper struct{}

func newReaper(hclog.Logger, string) *reaper { return &reaper{} }

func (r *reaper) stop() {}

func (r *reaper) spawn(_ string, start func() (int, error)) error {
	_, err := start()
	return err
}

func (r *reaper) ended(int) {}

func (r *reaper) sweep(syscall.Signal, string) int { return 0 }

func (r *reaper) finish(context.Context, time.Time) error { return nil }
