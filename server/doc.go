// Package server is the coordinator's gRPC service: it turns RPCs into ledger
// commands proposed through Raft, and ledger results into replies.
//
// Contracts:
//
//   - Every reply carries a ReplyHeader whose term is the Raft term the reply
//     was decided in: the term of the log entry that carried a write, or the
//     term verified by a read-index barrier for a read. Clients reject replies
//     older than the newest term they have seen.
//   - Writes and current reads are served by the serving leader only (the
//     leader whose epoch entry has applied). Any other replica answers
//     codes.Unavailable whose status details hold a ReplyHeader naming the
//     leader it knows of, so clients can follow the hint.
//   - CAS misses are ordinary per-item results, never transport errors.
//   - Error mapping: bad input codes.InvalidArgument; unknown run or item
//     codes.NotFound; not leader codes.Unavailable with hint; a steal from a
//     non-idle worker codes.FailedPrecondition; other failures of the
//     replica (raft's timeouts and errors, a replica that stopped applying)
//     codes.Unavailable; a broken FSM contract or any error not recognised
//     codes.Internal (a bug, which a retry would meet again).
//   - A Report's reports are proposed as one batch (raftnode's
//     ProposeBatch), and results[i] answers reports[i].
//   - A long-poll Claim is released the moment this replica loses leadership:
//     it answers Unavailable with the new leader's hint, never work decided
//     in an old term.
//   - Claim, Steal and OwnedItems hand out each item with its run's model,
//     sampling and kind and its dependencies' results (Item.deps, in
//     depends_on order), and never more than one message holds: claimed or
//     stolen items that do not fit are nacked back to Pending, an item too
//     large to fit alone is failed with a reason, and OwnedItems lists a
//     prefix and sets truncated (see deliver).
//   - Only the leader runs the failure scan, and it only proposes: whether a
//     worker is expired is decided by the ledger from leader-stamped times.
//   - After authentication each caller certificate is held to a rate of
//     mutating calls (Config.MutationRate, MutationBurst) and a number of
//     concurrent Events long-polls (Config.MaxLongPollsPerCaller) and of
//     concurrent Claim long-polls (Config.MaxClaimPollsPerCaller); past
//     them a call is codes.ResourceExhausted with an errdetails.RetryInfo
//     and a retry-after header, and nothing was done (see callerLimits).
//     A RESOURCE_EXHAUSTED without RetryInfo (a full ledger, a busy
//     in-flight budget, a tenant's max_queued quota) is not to be retried
//     blindly.
//   - A run is its tenant's (tenant.go): a client certificate submits as its
//     own name, a gateway or admin certificate for the tenant it names; a
//     client's CancelRun, DeleteRun, Results and submit of another
//     tenant's run are codes.PermissionDenied naming the owner, and change
//     nothing. SetTenant is admin only; ListTenants and RunStatus show every
//     tenant's runs.
package server
