// Package hostile is jepsen-lite's hostile-client nemesis. During a chaos
// run it attacks the cluster the way a client holding some certificate of
// the cluster's CA (or none) would: forged and foreign reports and
// deregistrations, membership changes without authority, plaintext calls
// to TLS ports, raft-shaped bytes sent to the Raft port, oversized and
// malformed submissions into the workload's runs, worker calls from an
// identity that never registered, and range-run calls (SubmitRanges that
// the edge must refuse or from a worker's certificate; ReportRange that is
// malformed, for another worker's range, from the client certificate, or
// for a run that does not exist). Every attack goes over real gRPC (or raw
// TCP and TLS for the Raft port) from the harness's place in the cluster's
// network, on a schedule derived from the seed (Plan).
//
// Each attack is recorded once it is over as one history.TypeHostile event:
// the outcomes that refuse it (Expect), the outcome seen (Got, or
// Inconclusive when the cluster could not answer within the attack's
// window), and any change traced to it (Changed). The checker's
// hostile-refused verdict judges them; the workload's checkers never see
// them.
package hostile
