package localcluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ExpectArgs are the flags a replica of an n-replica cluster formed with
// --bootstrap-expect gets: --bootstrap-expect n and --join naming the
// gRPC addresses of the first n replicas (its own among them).
func (c *Cluster) ExpectArgs(n int) []string {
	n = min(n, len(c.Replicas))
	addrs := make([]string, n)
	for i := range n {
		addrs[i] = c.Replicas[i].GRPCAddr
	}
	return []string{"--bootstrap-expect", strconv.Itoa(n), "--join", strings.Join(addrs, ",")}
}

// formExpect starts every replica but the Standby ones at once with
// ExpectArgs, and waits until the leader has them all as voters (none:
// nothing to wait for).
func (c *Cluster) formExpect(ctx context.Context, exited func(error) error) error {
	n := len(c.Replicas) - c.cfg.Standby
	if n == 0 {
		return nil
	}
	for _, r := range c.Replicas[:n] {
		if err := r.start(c.ExpectArgs(n)...); err != nil {
			return err
		}
		if c.cfg.Started != nil {
			c.cfg.Started(r)
		}
	}
	if err := c.WaitVoters(ctx, n); err != nil {
		return exited(fmt.Errorf("--bootstrap-expect %d: %w", n, err))
	}
	return nil
}
