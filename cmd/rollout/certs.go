package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollout/rollout/api/mtls"
)

// certsCmd generates a development CA and one certificate per name, for
// running a local cluster with mutual TLS on every edge.
func (a *app) certsCmd() *cobra.Command {
	var dir string
	var names []string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "certs --dir DIR --names c1:replica,c2:replica,c3:replica,w1:worker,cli:client,ops:admin",
		Short: "Generate a dev CA and a certificate per replica, worker or client (mutual TLS)",
		Long: "certs writes DIR/ca.pem (and its key) and, for each name, DIR/NAME.pem and DIR/NAME-key.pem.\n" +
			"The certificate's Common Name is the name: a worker's name is its identity. Each certificate\n" +
			"serves as client and server and is valid for localhost, 127.0.0.1 and ::1. Pass the files with\n" +
			"--tls-ca DIR/ca.pem --tls-cert DIR/NAME.pem --tls-key DIR/NAME-key.pem to every binary.",
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write the CA and certificates into (required)")
	cmd.Flags().StringSliceVar(&names, "names", nil, "certificates to issue as NAME:ROLE, comma-separated; ROLE is replica, worker, client or admin (required)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 30*24*time.Hour, "validity of the CA and certificates")
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagRequired("names")
	cmd.RunE = a.action(func(_ context.Context, _ *cobra.Command) error {
		if validFor <= 0 {
			return usagef("--valid-for must be positive, got %v", validFor)
		}
		certs := make([]mtls.Cert, 0, len(names))
		for _, n := range names {
			c, err := mtls.ParseCert(n)
			if err != nil {
				return usagef("--names: %v", err)
			}
			certs = append(certs, c)
		}
		if err := mtls.GenerateDevCA(dir, certs, validFor); err != nil {
			if errors.Is(err, mtls.ErrBadName) {
				return usagef("--names: %v", err)
			}
			return err
		}
		fmt.Fprintf(a.stdout, "wrote a dev CA and %d certificates to %s\n", len(names), dir)
		return nil
	})
	return cmd
}
