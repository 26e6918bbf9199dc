// Package dashboard is the read-only web dashboard a coordinator replica
// serves on --http-addr: run progress with live rate and ETA, each tenant's
// weight, quotas and share of the fleet, a grid of the workers, the
// replica set with its leader and term history, a chart of
// throughput over time and the recent ledger events, updated live in the
// page without reloading it.
//
// Contracts:
//
//   - Read-only. The handler answers GET and HEAD only (anything else is 405
//     Method Not Allowed); no endpoint changes the ledger, the membership or
//     a worker, and the page has no control that could.
//   - Current data. Run counters, workers and events are linearizable reads
//     (RunStatus, Events) through a Reader that follows the leader, so a
//     follower's dashboard shows what the leader decides; the JSON says which
//     replica answered and in which term. When no leader can be reached the
//     page says so, names the leader this replica last knew of, and keeps
//     the last data it had, marked stale. The replica set is this replica's
//     local view (Cluster), marked as such.
//   - Bounded cost. One background loop (Dashboard.Run) reads the cluster
//     once per Config.Interval, whatever the number of browsers; HTTP
//     requests are answered from what it read. It keeps a bounded ring of
//     throughput samples (Config.History) so that the chart survives a page
//     reload, and a bounded list of recent events (Config.Events).
//   - Assets are embedded (go:embed): hand-written HTML, CSS and JavaScript,
//     charts drawn as inline SVG by that script; nothing is fetched from
//     elsewhere, and the Content-Security-Policy forbids it.
//
// Security model. The dashboard shows run names, worker ids, counters,
// replica ids and their addresses, and event details; it shows no item
// payloads or results. It authenticates no one: whoever reaches --http-addr
// can read it. So:
//
//   - A replica with TLS serves the dashboard over HTTPS with its own
//     certificate (ServerTLS), asking for no client certificate, so that a
//     browser can open it; browsers must trust the cluster's CA (or the user
//     accepts the warning).
//   - Without TLS (a replica started --insecure) it serves plain HTTP, and
//     CheckAddr refuses a non-loopback address unless insecure was given.
//     Plain HTTP answers only requests whose Host is an IP address or
//     localhost (a DNS-rebinding page cannot read it through a victim's
//     browser).
//   - Responses carry a strict Content-Security-Policy (same origin only, no
//     inline script or style), X-Content-Type-Options: nosniff,
//     X-Frame-Options: DENY and Referrer-Policy: no-referrer; API responses
//     are not cached.
//
// Put an authenticating reverse proxy in front of it, or keep it on a
// loopback or trusted network, where run names and worker ids are
// sensitive.
package dashboard
