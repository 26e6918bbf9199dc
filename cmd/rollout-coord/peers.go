package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/peers"
)

// checkFederationFlags refuses --peers without --cluster-name and a
// --cluster-name that is not a DNS label.
func checkFederationFlags(o *options) error {
	if o.peersFile != "" && o.clusterName == "" {
		return fmt.Errorf("--peers needs --cluster-name (the name peers know this cluster by)")
	}
	if o.clusterName != "" {
		if err := mtls.CheckClusterName(o.clusterName); err != nil {
			return fmt.Errorf("--cluster-name: %w", err)
		}
	}
	return nil
}

// loadPeers loads --peers (nil without it); a file that does not load
// stops the replica before it opens anything.
func loadPeers(o *options) (*peers.Watcher, error) {
	if o.peersFile == "" {
		return nil, nil
	}
	w, err := peers.NewWatcher(o.peersFile, o.clusterName)
	if err != nil {
		return nil, fmt.Errorf("--peers: %w", err)
	}
	return w, nil
}

// watchPeers re-reads the peers file on every SIGHUP until ctx ends (a
// file that does not load is refused with a logged error; the previous
// one stays in use).
func watchPeers(ctx context.Context, w *peers.Watcher, o *options, log hclog.Logger) {
	log.Info("federation on", "cluster", o.clusterName, "peers", w.Current().Names())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		pl := log.Named("peers")
		w.ReloadOn(ctx, hup, pl.Info, pl.Error)
	}()
}
