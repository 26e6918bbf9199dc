// Package gateway serves the OpenAI Batch API (files and batches) over HTTP
// in OpenAI's own shapes, on a rollout cluster: the official OpenAI SDKs
// submit to the cluster by changing their base URL and key.
//
// A gateway is stateless. Uploaded files and the gateway's records (a
// file's metadata, a batch's request and its final files) are objects in
// its store (Config.Store, the object store of the runs); a batch is a
// rollout run named by the batch id, whose state is the ledger's. Any
// number of gateways may serve one cluster and one store; a gateway killed
// at any point loses nothing a client was told had happened:
//
//   - an upload is stored under its content key first and becomes visible
//     only when its metadata object is written, after the bytes are durable;
//   - creating a batch writes its record ("validating"), submits the run
//     and then records it "in_progress" before answering; a record left
//     "validating" by a killed gateway (whose client got no answer, and
//     whose SDK therefore created the batch again) is failed by the next
//     gateway that reads or sweeps it, and its partial run cancelled, so a
//     create never runs twice;
//   - a finished run's output and error files get ids derived from the
//     batch id and bytes derived only from the ledger's exactly-once
//     results, so two gateways that finalize one batch at once write the
//     same files.
//
// Store layout, under Prefix ("gateway/"):
//
//	files/ID/content         the uploaded (or output) bytes
//	files/ID/meta.json       the file object (visible once this exists)
//	batches/ID.json          the batch record
//	active/ID                each unfinished batch (what Sweep reads)
//	owners/NAME/files/T-ID   listing index, T the inverted creation time
//	owners/NAME/batches/T-ID
//
// Authentication is OpenAI's: "Authorization: Bearer KEY" with keys whose
// SHA-256 is in a keys file (Keys); a key's name owns what it creates and
// sees nothing else.
//
// Tenants (issue 30): every batch's run is submitted at its key's priority
// (a keys-file setting, DefaultPriority when absent) and, with
// Config.TenantPerKey (a gateway certificate), as its key's name's tenant,
// so that the cluster's fair share and quotas hold between keys. A create
// the cluster refuses for the tenant's max_queued quota is answered 429 in
// OpenAI's shape for a full enqueued limit (code token_limit_exceeded) and
// leaves no batch: its record, listing and active entries are deleted, and
// what of its run the cluster took is cancelled and deleted.
package gateway
