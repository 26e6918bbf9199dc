package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
)

// tenantClient is what the tenant commands call.
type tenantClient interface {
	SetTenant(ctx context.Context, req *rolloutv1.SetTenantRequest) (*rolloutv1.SetTenantResponse, error)
	ListTenants(ctx context.Context, req *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error)
}

// maxTenantWeight bounds --weight (the coordinator's bound).
const maxTenantWeight = 1000

func (a *app) tenantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant (set NAME [--weight W] [--max-queued N] [--max-running M] [--max-priority P] | list) --coord H:P[,...]",
		Short: "Tenants: their fair-share weights and quotas (set, admin) and their work and share (list)",
		Long: "Every run belongs to a tenant: the name of the certificate that submitted it (or, through\n" +
			"the gateway, the API key's name). Claims serve a higher priority first; within a priority\n" +
			"they divide the fleet between tenants in proportion to their weights (by usage that\n" +
			"halves every hour), and between one tenant's runs in turn. See README \"Sharing a cluster\".",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.tenantSetCmd(), a.tenantListCmd())
	return cmd
}

func (a *app) tenantSetCmd() *cobra.Command {
	var coords []string
	var weight uint32
	var maxQueued, maxRunning uint64
	var maxPriority uint32
	cmd := &cobra.Command{
		Use:   "set NAME --coord H:P[,...] [--weight W] [--max-queued N] [--max-running M] [--max-priority P]",
		Short: "Set a tenant's weight and quotas (admin); flags not given keep their value",
		Long: "set changes a tenant's record in the ledger (creating it: weight 1, no quotas). --weight W\n" +
			"(1 to 1000) is its share of the fleet relative to the other tenants of a priority: weights\n" +
			"1 and 3 get items in the ratio 1:3 while both have work; a tenant alone gets the whole\n" +
			"fleet. --max-queued N refuses a submit that would put more than N of its items in the\n" +
			"queue (the submit is refused whole: RESOURCE_EXHAUSTED, nothing changes). --max-running M\n" +
			"stops its claims at M running items. --max-priority P (1 to 5) caps the priority of the runs\n" +
			"it creates from now on: a higher one is lowered to P, not refused (a federation peer's tenant:\n" +
			"docs/FEDERATION.md). 0 removes a quota or the cap. Needs an admin certificate.",
		Args: cobra.ExactArgs(1),
	}
	addCoordFlag(cmd, &coords)
	f := cmd.Flags()
	f.Uint32Var(&weight, "weight", 1, fmt.Sprintf("fair-share weight, 1 to %d", maxTenantWeight))
	f.Uint64Var(&maxQueued, "max-queued", 0, "most items queued at once (a submit past it is refused whole); 0: no quota")
	f.Uint64Var(&maxRunning, "max-running", 0, "most items running at once (claims stop there); 0: no quota")
	f.Uint32Var(&maxPriority, "max-priority", 0, "highest priority of the runs it creates, 1 to 5 (a higher one is lowered to it); 0: no cap")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		name := cmd.Flags().Arg(0)
		if name == "" || strings.TrimSpace(name) != name {
			return usagef("tenant set needs a NAME without leading or trailing spaces, got %q", name)
		}
		req := &rolloutv1.SetTenantRequest{Name: name}
		if cmd.Flags().Changed("weight") {
			if weight < 1 || weight > maxTenantWeight {
				return usagef("--weight must be 1 to %d, got %d", maxTenantWeight, weight)
			}
			req.Weight = &weight
		}
		if cmd.Flags().Changed("max-queued") {
			req.MaxQueued = &maxQueued
		}
		if cmd.Flags().Changed("max-running") {
			req.MaxRunning = &maxRunning
		}
		if cmd.Flags().Changed("max-priority") {
			if maxPriority > batch.MaxPriority {
				return usagef("--max-priority must be 1 to %d (0: no cap), got %d", batch.MaxPriority, maxPriority)
			}
			req.MaxPriority = &maxPriority
		}
		if req.Weight == nil && req.MaxQueued == nil && req.MaxRunning == nil && req.MaxPriority == nil {
			return usagef("tenant set %s changes nothing: give --weight, --max-queued, --max-running or --max-priority", name)
		}
		tc, closeFn, err := a.tenantClient(coords)
		if err != nil {
			return err
		}
		defer closeFn()
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		resp, err := tc.SetTenant(cctx, req)
		if err != nil {
			return a.rpcError(fmt.Sprintf("set tenant %q", name), a.timeout, err)
		}
		t := resp.GetTenant()
		var capped string // shown only when set: the line stays as it was without
		if p := t.GetMaxPriority(); p != 0 {
			capped = fmt.Sprintf(", max priority %d", p)
		}
		fmt.Fprintf(a.stdout, "tenant %s: weight %d, max queued %s, max running %s%s\n", name, t.GetWeight(),
			quotaName(t.GetMaxQueued()), quotaName(t.GetMaxRunning()), capped)
		return nil
	})
	return cmd
}

func (a *app) tenantListCmd() *cobra.Command {
	var coords []string
	cmd := &cobra.Command{
		Use:   "list --coord H:P[,...]",
		Short: "List the tenants: weight, quotas, queued, running and done items, decayed usage, share",
		Args:  cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		tc, closeFn, err := a.tenantClient(coords)
		if err != nil {
			return err
		}
		defer closeFn()
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		resp, err := tc.ListTenants(cctx, &rolloutv1.ListTenantsRequest{})
		if err != nil {
			return a.rpcError("list tenants", a.timeout, err)
		}
		printTenants(a.stdout, resp.GetTenants())
		return nil
	})
	return cmd
}

// tenantClient connects to the cluster for the tenant commands.
func (a *app) tenantClient(coords []string) (tenantClient, func(), error) {
	c, err := a.client(coords)
	if err != nil {
		return nil, nil, err
	}
	tc, ok := c.(tenantClient)
	if !ok {
		_ = c.Close()
		return nil, nil, fmt.Errorf("this client cannot set or list tenants")
	}
	return tc, func() { _ = c.Close() }, nil
}

// printTenants writes the tenants table.
func printTenants(w io.Writer, ts []*rolloutv1.Tenant) {
	if len(ts) == 0 {
		fmt.Fprintln(w, "no tenants")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tWEIGHT\tMAX QUEUED\tMAX RUNNING\tRUNS\tACTIVE\tQUEUED\tRUNNING\tDONE\tUSAGE\tSHARE\tMAX PRIORITY")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t%s\n", t.GetName(), t.GetWeight(),
			quotaName(t.GetMaxQueued()), quotaName(t.GetMaxRunning()), t.GetRuns(), t.GetActive(),
			t.GetQueued(), t.GetRunning(), t.GetDone(), t.GetUsage(), shareName(t.GetShare()), quotaName(uint64(t.GetMaxPriority())))
	}
	_ = tw.Flush()
}

// quotaName shows a quota ("-" for none).
func quotaName(n uint64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
