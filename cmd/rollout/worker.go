package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

// workerCmd is "rollout worker": operations on the workers a cluster knows.
func (a *app) workerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Operate on workers (evict)",
		Long: "worker groups operations on the workers registered with a cluster. Workers register\n" +
			"themselves; \"rollout status\" lists them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(a.stderr)
			_ = cmd.Help()
			return usagef("worker needs a subcommand: evict")
		},
	}
	cmd.AddCommand(a.workerEvictCmd())
	return cmd
}

// workerEvictCmd is "rollout worker evict ID": an operator takes a worker's
// items back (the admin role). Its Running items go back to Pending at once,
// its later reports are refused, and it must register again to get work.
func (a *app) workerEvictCmd() *cobra.Command {
	var coords []string
	cmd := &cobra.Command{
		Use:   "evict ID --coord H:P[,...]",
		Short: "Evict a worker: its running items go back to pending (admin)",
		Long: "evict removes the worker ID from the ledger through the leader. Every item it is running\n" +
			"goes back to pending at once, so other workers can take it; whatever the evicted worker\n" +
			"still reports for those items is refused. A worker process that is still alive registers\n" +
			"again and starts over with nothing. Use it for a worker that heartbeats but makes no\n" +
			"progress. It needs an admin certificate.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("worker evict takes exactly one worker ID, got %d arguments", len(args))
			}
			return nil
		},
	}
	addCoordFlag(cmd, &coords)
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		id := cmd.Flags().Arg(0)
		if id == "" || strings.TrimSpace(id) != id {
			return usagef("worker ID %q is empty or has leading or trailing spaces", id)
		}
		return a.withClient(ctx, coords, func(cctx context.Context, c *coordclient.Client) error {
			resp, err := c.EvictWorker(cctx, &rolloutv1.EvictWorkerRequest{WorkerId: id})
			if isNotFound(err) {
				return fmt.Errorf("evict worker %s: NotFound: the cluster has no registered worker %q (it never registered, or it left, expired or was evicted already): %w", id, id, err)
			}
			if err != nil {
				return a.rpcError("evict worker "+id, a.timeout, err)
			}
			h := resp.GetHeader()
			items := "items"
			if resp.GetRepended() == 1 {
				items = "item"
			}
			fmt.Fprintf(a.stdout, "evicted worker %s: %d %s back to pending (leader %s, term %d)\n",
				id, resp.GetRepended(), items, orDash(h.GetReplicaId()), h.GetTerm())
			return nil
		})
	})
	return cmd
}
