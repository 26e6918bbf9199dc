package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/dashboard"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/server"
)

// startDashboard serves the read-only web dashboard on --http-addr (see
// package dashboard): HTTPS with the replica's certificate under TLS, plain
// HTTP on loopback (or anywhere with --insecure) otherwise. Its reads go
// through a leader-following client that presents the replica's own
// certificate; the replica set is this replica's local view, with each
// member asked for its own (Cluster, any role may call it). stop ends the
// sampling loop and the HTTP server.
func startDashboard(o *options, grpcAdv string, tlsConf *tls.Config, svc *server.Server, ledger *fsm.Ledger, lim connlimit.Limits, log hclog.Logger) (stop func(), err error) {
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
	// The loss per step of training runs, from this replica's own ledger
	// (a local read: the curve may lag the leader by what this replica has
	// not applied yet; each finished item is read once).
	dc.Loss = dashboard.TrainingLossSummaries(ledgerPager(ledger), trainSteps, trainStepSummaries)
	d, err := dashboard.New(dc)
	if err != nil {
		client.Close()
		return nil, err
	}
	s, err := dashboard.ListenLimited(d, o.httpAddr, dashboard.ServerTLS(tlsConf), o.insecure, lim)
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

// ledgerPager pages a run's items out of the replica's own ledger.
func ledgerPager(l *fsm.Ledger) dashboard.ResultPager {
	return func(_ context.Context, run string, from uint64, limit int) ([]dashboard.ResultItem, uint64, bool, error) {
		items, next, done, err := l.Results(run, from, limit)
		if err != nil {
			return nil, from, false, err
		}
		out := make([]dashboard.ResultItem, len(items))
		for i, it := range items {
			out[i] = dashboard.ResultItem{Index: it.Index, Finished: it.State == fsm.StateDone || it.State == fsm.StateDead || it.State == fsm.StateCancelled,
				Result: it.Result, Summary: it.Summary}
		}
		return out, next, done, nil
	}
}

// trainStepSummaries decodes a training run's result summaries (runs whose
// results live in their store) into loss points.
func trainStepSummaries(summaries [][]byte) ([]dashboard.LossPoint, error) {
	steps, err := train.StepsFromSummaries(summaries)
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.LossPoint, len(steps))
	for i, st := range steps {
		out[i] = dashboard.LossPoint{Step: uint64(st.Step), Loss: st.Train.Loss, Accuracy: st.Train.Accuracy}
	}
	return out, nil
}

// trainSteps decodes a training run's results into loss points (the
// training loss and accuracy of each finished step).
func trainSteps(results [][]byte) ([]dashboard.LossPoint, error) {
	steps, err := train.StepsFromResults(results)
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.LossPoint, len(steps))
	for i, st := range steps {
		out[i] = dashboard.LossPoint{Step: uint64(st.Step), Loss: st.Train.Loss, Accuracy: st.Train.Accuracy}
	}
	return out, nil
}
