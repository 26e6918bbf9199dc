package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/api/coordclient"
	"github.com/rollout/rollout/api/dashboard"
	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/server"
)

// startDashboard serves the read-only web dashboard on --http-addr (see
// package dashboard): HTTPS with the replica's certificate under TLS, plain
// HTTP on loopback (or anywhere with --insecure) otherwise. Its reads go
// through a leader-following client that presents the replica's own
// certificate; the replica set is this replica's local view, with each
// member asked for its own (Cluster, any role may call it). stop ends the
// sampling loop and the HTTP server.
func startDashboard(o *options, grpcAdv string, tlsConf *tls.Config, svc *server.Server, log hclog.Logger) (stop func(), err error) {
	cc := coordclient.DefaultConfig()
	cc.Addrs = append([]string{grpcAdv}, splitAddrs(o.join)...)
	cc.TLS = tlsConf
	cc.CallTimeout = 2 * time.Second
	cc.Logger = log.Named("dashboard")
	client, err := coordclient.New(cc)
	if err != nil {
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	dc := dashboard.DefaultConfig()
	dc.Reader = client
	dc.Local = func(ctx context.Context) (*rolloutv1.ClusterResponse, error) {
		return svc.Cluster(ctx, &rolloutv1.ClusterRequest{})
	}
	dc.Peer = client.Cluster
	dc.Logger = log.Named("dashboard")
	// TODO(train-loss): once batch/train (branch h-train-core) is merged,
	// show the loss per step of training runs (the page draws it already):
	//	dc.Loss = dashboard.TrainingLoss(pager, decode)
	// with pager paging this replica's ledger.Results (Finished: the item
	// is Done or Dead) and decode mapping train.StepsFromResults's steps to
	// dashboard.LossPoint{Step, Train.Loss, Train.Accuracy}. Until then
	// dc.Loss is nil and the page shows no loss panel.
	d, err := dashboard.New(dc)
	if err != nil {
		client.Close()
		return nil, err
	}
	s, err := dashboard.Listen(d, o.httpAddr, dashboard.ServerTLS(tlsConf), o.insecure)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go d.Run(ctx)
	go func() {
		if err := s.Serve(); err != nil {
			log.Error("dashboard stopped", "error", err)
		}
	}()
	log.Info("dashboard serving (read-only)", "url", s.URL())
	return func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = s.Shutdown(sctx)
		client.Close()
	}, nil
}
