package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/mtls"
)

// withRevokeCmds adds the revoke and revoked subcommands to certs.
func (a *app) withRevokeCmds(certs *cobra.Command) *cobra.Command {
	certs.AddCommand(a.certsRevokeCmd(), a.certsRevokedCmd())
	return certs
}

// certsRevokeCmd revokes a certificate by name or serial number through
// the leader (admin).
func (a *app) certsRevokeCmd() *cobra.Command {
	var coords []string
	var serial bool
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke NAME|SERIAL --coord H:P[,...] [--serial] [--reason TEXT]",
		Short: "Revoke a certificate cluster-wide, by name or serial number (admin)",
		Long: "revoke adds a certificate to the revocation list held in the ledger: every replica refuses its\n" +
			"handshakes and closes its live connections within a second of the commit, and the list survives\n" +
			"failovers and restarts. A revoked worker is evicted in the same commit: its running items go back\n" +
			"to pending at once and its late reports are refused. A revoked replica's Raft traffic is refused:\n" +
			"remove it from the membership (rollout cluster remove ID).\n" +
			"\n" +
			"NAME revokes every certificate of that name (Common Name), now and later: issue the holder's\n" +
			"replacement under a new name. The name must be known to the cluster: a registered worker, a\n" +
			"member replica, an admin that has revoked before, or a certificate a replica has seen. SERIAL\n" +
			"(hexadecimal, colons allowed; openssl x509 -noout -serial prints it) revokes one certificate and\n" +
			"is always accepted. An argument that could be either is a name unless --serial is given.\n" +
			"Revoking the last admin certificate the cluster knows of is refused. It needs an admin certificate.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("certs revoke takes exactly one NAME or SERIAL, got %d arguments", len(args))
			}
			return nil
		},
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().BoolVar(&serial, "serial", false, "the argument is a serial number")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the entry")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		arg := cmd.Flags().Arg(0)
		if arg == "" || strings.TrimSpace(arg) != arg {
			return usagef("%q is empty or has leading or trailing spaces", arg)
		}
		req := &rolloutv1.RevokeCertificateRequest{Name: arg, Reason: reason}
		if serial || strings.Contains(arg, ":") || strings.HasPrefix(strings.ToLower(arg), "0x") {
			s, err := mtls.ParseSerial(arg)
			if err != nil {
				return usagef("%v", err)
			}
			req = &rolloutv1.RevokeCertificateRequest{Serial: s, Reason: reason}
		}
		return a.withClient(ctx, coords, func(cctx context.Context, c *coordclient.Client) error {
			resp, err := c.RevokeCertificate(cctx, req)
			switch status.Code(err) {
			case codes.OK:
			case codes.NotFound:
				return fmt.Errorf("revoke %s: the cluster knows no certificate named %q; give its serial number with --serial "+
					"(openssl x509 -noout -serial -in CERT): %w", arg, arg, err)
			case codes.AlreadyExists:
				fmt.Fprintf(a.stdout, "%s is already revoked\n", arg)
				return nil
			case codes.FailedPrecondition:
				return fmt.Errorf("revoke %s: refused: %s", arg, status.Convert(err).Message())
			default:
				return a.rpcError("revoke "+arg, a.timeout, err)
			}
			r := resp.GetRevocation()
			what := "certificates named " + r.GetName()
			if r.GetSerial() != "" {
				what = "certificate serial " + r.GetSerial()
				if r.GetHolder() != "" {
					what += " (" + r.GetHolder() + ")"
				}
			}
			fmt.Fprintf(a.stdout, "revoked %s (leader %s, term %d)\n", what, orDash(resp.GetHeader().GetReplicaId()), resp.GetHeader().GetTerm())
			if r.GetRole() == string(mtls.RoleWorker) {
				fmt.Fprintf(a.stdout, "worker evicted: %d items back to pending\n", resp.GetRepended())
			}
			if r.GetRole() == string(mtls.RoleReplica) {
				fmt.Fprintf(a.stdout, "a replica's certificate: remove it from the membership with rollout cluster remove %s\n",
					orDash(r.GetName()+r.GetHolder()))
			}
			return nil
		})
	})
	return cmd
}

// certsRevokedCmd lists the revocation list.
func (a *app) certsRevokedCmd() *cobra.Command {
	var coords []string
	cmd := &cobra.Command{
		Use:   "revoked --coord H:P[,...]",
		Short: "List the revoked certificates (admin)",
		Args:  cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.RunE = a.action(func(ctx context.Context, _ *cobra.Command) error {
		return a.withClient(ctx, coords, func(cctx context.Context, c *coordclient.Client) error {
			resp, err := c.Revocations(cctx, &rolloutv1.RevocationsRequest{})
			if err != nil {
				return a.rpcError("list revocations", a.timeout, err)
			}
			if len(resp.GetRevocations()) == 0 {
				fmt.Fprintln(a.stdout, "no certificate is revoked")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERIAL\tNAME\tROLE\tREVOKED\tBY\tREASON")
			for _, r := range resp.GetRevocations() {
				name := r.GetName()
				if name == "" && r.GetHolder() != "" {
					name = "(" + r.GetHolder() + ")"
				}
				at := "-"
				if r.GetRevokedUnixNano() != 0 {
					at = time.Unix(0, r.GetRevokedUnixNano()).UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", orDash(r.GetSerial()), orDash(name), orDash(r.GetRole()), at, orDash(r.GetBy()), orDash(r.GetReason()))
			}
			return tw.Flush()
		})
	})
	return cmd
}
