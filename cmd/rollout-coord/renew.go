package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/certrenew"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/server"
)

// renewOptions are the flags of certificate renewal: signing other nodes'
// renewals (--tls-ca-key, --tls-valid-for) and renewing this replica's own
// certificate (--tls-renew).
type renewOptions struct {
	caKey    string
	validFor time.Duration
	renew    bool
}

func (r *renewOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&r.caKey, "tls-ca-key", "", "PEM private key of the CA in --tls-ca: with it this replica signs the certificate renewals (Renew) of workers, replicas and clients, "+
		"for their own name and role only; without it Renew is refused and certificates are renewed by hand (keep this file as private as the CA)")
	f.DurationVar(&r.validFor, "tls-valid-for", server.DefaultRenewValidFor, "validity of the certificates this replica signs with --tls-ca-key (never beyond the CA's expiry)")
	f.BoolVar(&r.renew, "tls-renew", true, "renew this replica's certificate from the cluster before it expires (when a third of its life is left), "+
		"replacing the --tls-cert and --tls-key files; needs a replica started with --tls-ca-key (--tls-renew=false: renew by hand)")
}

// validate checks the flags that need no file.
func (r *renewOptions) validate(insecure bool) error {
	if r.caKey != "" && insecure {
		return errors.New("--tls-ca-key needs mutual TLS (--tls-ca, --tls-cert, --tls-key), not --insecure")
	}
	if r.validFor < 0 || (r.validFor == 0 && r.caKey != "") {
		return fmt.Errorf("--tls-valid-for must be positive, got %v", r.validFor)
	}
	return nil
}

// loadCA returns the CA this replica signs renewals with (nil without
// --tls-ca-key): the CA of --tls-ca whose key --tls-ca-key is. A CA that has
// expired is refused; a --tls-valid-for past the CA's expiry is cut there,
// with a warning.
func (r *renewOptions) loadCA(caFile string, log hclog.Logger) (*mtls.CA, error) {
	if r.caKey == "" {
		return nil, nil
	}
	ca, err := mtls.LoadCA(caFile, r.caKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca-key: %w", err)
	}
	now := time.Now()
	if !now.Before(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("--tls-ca-key: %w at %s: rotate the CA (docs/SECURITY.md)", mtls.ErrCAExpired, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if err := ca.CheckValidity(now, r.validFor); err != nil {
		log.Warn("--tls-valid-for reaches past the CA's expiry: renewed certificates end with the CA; rotate the CA before then", "error", err)
	}
	log.Info("signing certificate renewals", "ca", ca.Cert.Subject.CommonName, "ca_not_after", ca.Cert.NotAfter.UTC().Format(time.RFC3339),
		"valid_for", r.validFor)
	return ca, nil
}

// startRenewal runs the renewal loop of this replica's own certificate in
// the background until ctx ends, asking the replicas of the ledger's
// membership (this one first) over mutual TLS with conf. The returned
// function waits for the loop to stop. Without TLS or with
// --tls-renew=false it does nothing.
func startRenewal(ctx context.Context, o *options, conf *tls.Config, grpcAdv string, ledger *fsm.Ledger, log hclog.Logger) (wait func()) {
	if conf == nil || !o.renewal.renew {
		return func() {}
	}
	cfg := certrenew.DefaultConfig()
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = o.tls.Cert, o.tls.Key, o.tls.CA
	cfg.Identity = mtls.Identity{Name: o.id, Role: mtls.RoleReplica}
	cfg.Logger = log.Named("certrenew")
	cfg.Renew = func(ctx context.Context, csr []byte) ([]byte, error) {
		addrs := []string{grpcAdv}
		for _, m := range ledger.Members() {
			if m.GRPCAddr != "" && !slices.Contains(addrs, m.GRPCAddr) {
				addrs = append(addrs, m.GRPCAddr)
			}
		}
		cc := coordclient.DefaultConfig()
		cc.Addrs, cc.TLS, cc.Logger = addrs, conf, log.Named("certrenew")
		client, err := coordclient.New(cc)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		resp, err := client.Renew(ctx, &rolloutv1.RenewRequest{Csr: csr})
		return resp.GetCertificate(), err
	}
	return certrenew.Start(ctx, cfg, log)
}
