package main

import "github.com/rollout/rollout/internal/mtls"

// identity is the identity of the client certificate the CLI presents, as
// loaded by tlsConfig (a.client calls it): the zero Identity with
// --insecure, before the files are loaded, or for a certificate without a
// role (the cluster refuses it anyway). Submits apply the replicas' tenant
// rule to it before they upload anything (runs.SubmitConfig.Identity).
func (a *app) identity() mtls.Identity {
	if a.tlsSrc == nil {
		return mtls.Identity{}
	}
	m := a.tlsSrc.Current()
	if m == nil || m.Leaf == nil {
		return mtls.Identity{}
	}
	id, err := mtls.IdentityOf(m.Leaf)
	if err != nil {
		return mtls.Identity{}
	}
	return id
}
