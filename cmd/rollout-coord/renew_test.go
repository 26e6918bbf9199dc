package main

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
)

// TestRenewFlags: --tls-ca-key needs TLS and must be the key of the CA in
// --tls-ca; --tls-valid-for must be positive, and one past the CA's expiry
// is cut there with a warning; the defaults sign for 30 days and renew
// this replica's own certificate.
func TestRenewFlags(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}}, 2*time.Hour))

	var r renewOptions
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	r.addFlags(fs)
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, 720*time.Hour, r.validFor)
	require.True(t, r.renew)
	require.Empty(t, r.caKey)
	require.NoError(t, r.validate(false))
	ca, err := r.loadCA(filepath.Join(dir, "ca.pem"), hclog.NewNullLogger())
	require.NoError(t, err)
	require.Nil(t, ca, "no key, no signing")

	require.NoError(t, fs.Parse([]string{"--tls-ca-key", filepath.Join(dir, "ca-key.pem"), "--tls-valid-for", "1h", "--tls-renew=false"}))
	require.False(t, r.renew)
	require.ErrorContains(t, r.validate(true), "--tls-ca-key needs mutual TLS")
	require.NoError(t, r.validate(false))
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs})
	ca, err = r.loadCA(filepath.Join(dir, "ca.pem"), log)
	require.NoError(t, err)
	require.NotNil(t, ca)
	require.NotContains(t, logs.String(), "past the CA's expiry")

	r.validFor = 3 * time.Hour
	_, err = r.loadCA(filepath.Join(dir, "ca.pem"), log)
	require.NoError(t, err)
	require.Contains(t, logs.String(), "--tls-valid-for reaches past the CA's expiry")

	for _, bad := range []time.Duration{0, -time.Second} {
		r.validFor = bad
		require.ErrorContains(t, r.validate(false), "--tls-valid-for must be positive")
	}
	r.validFor = time.Hour
	r.caKey = filepath.Join(dir, "c1-key.pem")
	_, err = r.loadCA(filepath.Join(dir, "ca.pem"), log)
	require.ErrorIs(t, err, mtls.ErrBadPEM)
	require.ErrorContains(t, err, "--tls-ca-key")
	r.caKey = filepath.Join(dir, "missing.pem")
	_, err = r.loadCA(filepath.Join(dir, "ca.pem"), log)
	require.ErrorIs(t, err, mtls.ErrNoCA)
}
