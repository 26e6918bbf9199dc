package main

import (
	"github.com/rollout/rollout/api/coordclient"
	"github.com/rollout/rollout/api/runs/runstest"
)

// fakeCoord is the in-memory coordinator of the CLI's tests.
type fakeCoord = runstest.Coordinator

var _ coordConn = (*fakeCoord)(nil)

func newFakeCoord() *fakeCoord { return runstest.New() }

// connectFake returns an app.connect that hands out f and records the
// config in got (when not nil).
func connectFake(f *fakeCoord, got *coordclient.Config) func(coordclient.Config) (coordConn, error) {
	return func(cfg coordclient.Config) (coordConn, error) {
		if got != nil {
			*got = cfg
		}
		return f, nil
	}
}
