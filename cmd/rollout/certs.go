package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollout/rollout/internal/mtls"
)

// certsCmd issues role certificates for mutual TLS on every edge: from a
// new dev CA, or from the CA already in --dir.
func (a *app) certsCmd() *cobra.Command {
	var dir string
	var names, hosts []string
	var validFor, caValidFor time.Duration
	var ownerSpec string
	cmd := &cobra.Command{
		Use:   "certs --dir DIR --names c1:replica,c2:replica,c3:replica,w1:worker,cli:client,ops:admin [--hosts H1,H2] [--valid-for 720h] [--owner UID[:GID]]",
		Short: "Issue role certificates (replica, worker, client, admin, gateway, peer) from a dev CA, for mutual TLS",
		Long: "certs writes, for each NAME:ROLE, DIR/NAME.pem and DIR/NAME-key.pem signed by the CA in DIR\n" +
			"(DIR/ca.pem and DIR/ca-key.pem). When DIR holds no CA yet, a new one is made; when it does, the\n" +
			"CA is reused and every certificate issued before stays valid (add a worker later the same way).\n" +
			"\n" +
			"The certificate's name is the holder's identity; its role is what the holder may do:\n" +
			"  replica  a coordinator replica (rollout-coord --id NAME): the only role the Raft port admits,\n" +
			"           and only for names in the Raft configuration; may join itself to a cluster\n" +
			"  worker   a worker (rollout-worker --id NAME): Register, Claim, Report, Heartbeat, Steal,\n" +
			"           OwnedItems and Deregister, for its own id only\n" +
			"  client   rollout submit, status and results (SubmitItems, RunStatus, Results)\n" +
			"  admin    what a client may do, plus membership (Join, rollout cluster remove) and evicting\n" +
			"           workers\n" +
			"  gateway  a front end (rollout gateway): what a client may do, for any tenant it names\n" +
			"  peer     another rollout cluster (federation): NAME is the calling cluster's --cluster-name (a\n" +
			"           DNS label); issued by THIS cluster's CA, it may submit, read, cancel and delete only runs\n" +
			"           named NAME/..., as tenant NAME, and read which models this cluster serves\n" +
			"           (docs/FEDERATION.md)\n" +
			"Every role but peer may read the replica set (rollout cluster). A certificate without a role may do\n" +
			"nothing.\n" +
			"\n" +
			"A replica's certificate serves as client and server and is valid for localhost, 127.0.0.1, ::1,\n" +
			"its name and every --hosts entry (the addresses other machines reach the replicas at); every other\n" +
			"role's is for client use only, without SANs (clients accept only a replica as their server). For\n" +
			"NAME:gateway, NAME-https.pem and NAME-https-key.pem are also written: the gateway's HTTPS server\n" +
			"certificate (server use only, the same SANs as a replica's). Pass the files as\n" +
			"--tls-ca DIR/ca.pem --tls-cert DIR/NAME.pem --tls-key DIR/NAME-key.pem; keep DIR/ca-key.pem private.\n" +
			"\n" +
			"Certificates are short-lived: each is valid for --valid-for (30 days by default), a new CA for\n" +
			"--ca-valid-for (10 years), and no certificate may outlive its CA. Workers and replicas renew\n" +
			"their own certificates from the cluster before they expire when the replicas hold the CA key\n" +
			"(rollout-coord --tls-ca-key); otherwise run this command again for the names to renew\n" +
			"(docs/SECURITY.md, Renewing certificates).\n" +
			"\n" +
			"DIR is made mode 0700 for the user who runs this command. --owner UID[:GID] (as root) then gives\n" +
			"DIR and every file in it to that user (numbers: e.g. 65532:65532, the container images' user),\n" +
			"DIR mode 0750; keys stay 0600 and certificates 0644 (docs/DEPLOY.md, Compose).",
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the CA and the certificates (required)")
	cmd.Flags().StringSliceVar(&names, "names", nil, "certificates to issue as NAME:ROLE, comma-separated; ROLE is replica, worker, client, admin, gateway or peer (required)")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra host names or IP addresses the replicas' (and gateways' HTTPS) certificates are valid for, comma-separated")
	cmd.Flags().DurationVar(&validFor, "valid-for", 30*24*time.Hour, "validity of the certificates issued (never beyond the CA's expiry)")
	cmd.Flags().DurationVar(&caValidFor, "ca-valid-for", 10*365*24*time.Hour, "validity of a new CA (when DIR holds none); the certificates renew against it")
	cmd.Flags().StringVar(&ownerSpec, "owner", "", "give DIR and its files to UID[:GID] (numbers) after writing them, e.g. for a container's non-root user; needs root unless it is your own")
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagRequired("names")
	cmd.RunE = a.action(func(_ context.Context, _ *cobra.Command) error {
		if validFor <= 0 {
			return usagef("--valid-for must be positive, got %v", validFor)
		}
		if caValidFor <= 0 {
			return usagef("--ca-valid-for must be positive, got %v", caValidFor)
		}
		var owner *certOwner
		if ownerSpec != "" {
			o, err := parseCertOwner(ownerSpec)
			if err != nil {
				return usagef("--owner: %v", err)
			}
			if err := o.check(); err != nil {
				return usagef("%v", err)
			}
			owner = &o
		}
		certs := make([]mtls.Cert, 0, len(names))
		for _, n := range names {
			c, err := mtls.ParseCert(n)
			if err != nil {
				return usagef("--names: %v", err)
			}
			certs = append(certs, c)
		}
		reuse := mtls.HasCA(dir)
		err := mtls.CheckIssue(certs, hosts)
		if err == nil {
			err = issueCerts(dir, reuse, certs, hosts, validFor, caValidFor)
		}
		switch {
		case errors.Is(err, mtls.ErrBadValidity):
			return usagef("--valid-for: %v", err)
		case errors.Is(err, mtls.ErrBadName):
			return usagef("--names: %v", err)
		case errors.Is(err, mtls.ErrBadHost):
			return usagef("--hosts: %v", err)
		case err != nil:
			return err
		}
		if owner != nil {
			if err := chownCertDir(dir, *owner); err != nil {
				return err
			}
		}
		if reuse {
			fmt.Fprintf(a.stdout, "reusing the CA in %s: issued %d certificates\n", dir, len(certs))
		} else {
			fmt.Fprintf(a.stdout, "wrote a new dev CA and %d certificates to %s\n", len(certs), dir)
		}
		for _, c := range certs {
			fmt.Fprintf(a.stdout, "  %-8s %s  (%s)\n", c.Role, filepath.Join(dir, c.Name+".pem"), c.Name)
			if c.Role == mtls.RoleGateway {
				fmt.Fprintf(a.stdout, "  %-8s %s  (%s's HTTPS server certificate)\n", "https", mtls.HTTPSFilesFor(dir, c.Name).Cert, c.Name)
			}
		}
		if owner != nil {
			fmt.Fprintf(a.stdout, "gave %s and its files to %s\n", dir, owner)
		}
		return nil
	})
	return cmd
}

// issueCerts issues certs into dir: from the CA there when reuse, else from a
// new CA valid for caValidFor. The certificates' validity must end within the
// CA's (mtls.ErrBadValidity otherwise; nothing is written then).
func issueCerts(dir string, reuse bool, certs []mtls.Cert, hosts []string, validFor, caValidFor time.Duration) error {
	now := time.Now()
	if reuse {
		ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
		if err != nil {
			return err
		}
		if err := ca.CheckValidity(now, validFor); err != nil {
			return fmt.Errorf("%w (the CA in %s; give a shorter --valid-for or rotate the CA)", err, dir)
		}
		return mtls.IssueCerts(dir, certs, hosts, validFor)
	}
	if validFor > caValidFor {
		return fmt.Errorf("%w: %v is longer than the new CA's --ca-valid-for %v", mtls.ErrBadValidity, validFor, caValidFor)
	}
	if _, err := mtls.NewDevCA(dir, caValidFor); err != nil {
		return err
	}
	return mtls.IssueCerts(dir, certs, hosts, validFor)
}
