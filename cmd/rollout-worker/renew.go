package main

import (
	"context"

	"github.com/hashicorp/go-hclog"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/certrenew"
	"github.com/rollout/rollout/internal/mtls"
)

// renewUsage is the help of --tls-renew.
const renewUsage = "renew this worker's certificate from the cluster before it expires (when a third of its life is left): " +
	"a new key and a CSR over the worker's mutual-TLS connection, signed by a replica started with --tls-ca-key; " +
	"the new --tls-cert and --tls-key files replace the old ones (--tls-renew=false: renew by hand)"

// startRenewal runs the certificate renewal loop of worker id in the
// background over client, until ctx ends; the returned function waits for
// it to stop. Without TLS, or with --tls-renew=false, it does nothing.
func startRenewal(ctx context.Context, o *options, client *coordclient.Client, log hclog.Logger) (wait func()) {
	if o.insecure || !o.tls.Enabled() || !o.renew {
		return func() {}
	}
	cfg := certrenew.DefaultConfig()
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = o.tls.Cert, o.tls.Key, o.tls.CA
	cfg.Identity = mtls.Identity{Name: o.id, Role: mtls.RoleWorker}
	cfg.Logger = log.Named("certrenew")
	cfg.Renew = func(ctx context.Context, csr []byte) ([]byte, error) {
		resp, err := client.Renew(ctx, &rolloutv1.RenewRequest{Csr: csr})
		return resp.GetCertificate(), err
	}
	return certrenew.Start(ctx, cfg, log)
}
