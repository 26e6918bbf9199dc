// rollout dashboard: polls the replica's JSON endpoints once a second and
// redraws the page in place (no reload). Every text from the cluster goes
// through textContent, never HTML. Charts are inline SVG drawn here.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

let points = [];        // throughput samples, oldest first (server-side ring)
let lastPointT = 0;
let lastOK = 0;         // when a poll last succeeded (browser clock)

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmtNum(n) { return Number(n).toLocaleString("en-US"); }
function fmtRate(r) { return r >= 100 ? r.toFixed(0) : r.toFixed(1); }
function fmtDur(s) {
  if (s < 0 || !isFinite(s)) return "–";
  s = Math.round(s);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
}
function fmtTime(ms) { return ms ? new Date(ms).toLocaleTimeString("en-GB") : "–"; }
function ago(ms) { return ms < 0 ? "never" : (ms < 1000 ? ms + " ms ago" : fmtDur(ms / 1000) + " ago"); }

// getJSON fetches url, giving up after 5 s (a stopped replica must show
// as disconnected, not as live with old numbers).
async function getJSON(url) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 5000);
  try {
    const r = await fetch(url, { cache: "no-store", signal: ctl.signal });
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return await r.json();
  } catch (e) {
    throw new Error(e.name === "AbortError" ? url + ": no answer in 5 s" : e.message);
  } finally {
    clearTimeout(timer);
  }
}

async function poll() {
  try {
    const [ov, tp] = await Promise.all([getJSON("api/overview"), getJSON("api/throughput?since=" + lastPointT)]);
    for (const p of tp.points) if (p.t > lastPointT) { points.push(p); lastPointT = p.t; }
    const keep = 3600;
    if (points.length > keep) points = points.slice(points.length - keep);
    render(ov);
    lastOK = Date.now();
    document.body.dataset.ready = "1";
  } catch (e) {
    showBanner("The dashboard cannot reach this replica (" + e.message + "); retrying. The data below is from " + fmtTime(lastOK) + ".", false);
    $("live-dot").className = "dot stale";
    $("updated").textContent = "disconnected";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

function showBanner(text, info) {
  const b = $("banner");
  if (!text) { b.hidden = true; return; }
  b.hidden = false;
  b.className = info ? "banner info" : "banner";
  b.textContent = text;
}

// renderExpiring lists the certificates within a tenth of their life of
// expiring (this replica's own and its peers').
function renderExpiring(certs) {
  const b = $("certs-expiring");
  b.hidden = certs.length === 0;
  b.textContent = certs.length === 0 ? "" : "Certificates to renew (within a tenth of their life of expiring): " +
    certs.map((c) => c.name + " (" + c.role + (c.own ? ", this replica" : "") + ", serial " + c.serial + ") expires " + new Date(c.not_after_unix_ms).toISOString()).join("; ");
}

function render(ov) {
  const rep = ov.replica, rd = ov.read;
  $("replica-id").textContent = rep.id || "–";
  const state = $("replica-state");
  state.textContent = rep.state || "unknown";
  state.className = "badge " + (rep.state || "");
  const leader = rd.ok ? rd.leader : (rep.leader_id || "");
  $("term").textContent = rd.ok ? rd.term : (rep.term || "–");
  $("leader-id").textContent = leader || "none";
  $("leader-addr").textContent = rep.leader_addr ? "(" + rep.leader_addr + ")" : "";
  $("served-by").textContent = rd.served_by ? "last read answered by " + rd.served_by + " in term " + rd.term : "";

  const stale = !rd.ok;
  $("live-dot").className = "dot " + (stale ? "stale" : "ok");
  $("updated").textContent = stale ? "stale since " + fmtTime(rd.at_unix_ms) : "live · " + fmtTime(ov.now_unix_ms);
  if (stale) {
    let msg = "No current data: " + (rd.error || "no leader reachable") + ".";
    msg += rep.leader_id ? " This replica last knew " + rep.leader_id + " (" + (rep.leader_addr || "address unknown") + ") as leader." : " No leader is known (an election may be under way).";
    if (rd.at_unix_ms) msg += " Showing what was read at " + fmtTime(rd.at_unix_ms) + ".";
    showBanner(msg, false);
  } else if (rep.state && rep.state !== "leader" && rd.served_by && rd.served_by !== rep.id) {
    showBanner("This replica (" + rep.id + ") is a " + rep.state + ": the data is read through the leader " + rd.served_by + ".", true);
  } else {
    showBanner("");
  }
  const active = ov.runs.filter((r) => !r.finished);
  document.title = active.length
    ? active.map((r) => r.name + " " + (r.total ? Math.floor(100 * (r.done + r.dead) / r.total) : 0) + "%").join(" · ") + " — rollout"
    : "rollout dashboard";
  renderRuns(ov.runs);
  renderTenants(ov.tenants || [], ov.tenants_error);
  renderFederation(ov.cluster_name || "", ov.federation || [], ov.now_unix_ms);
  renderWorkers(ov.workers);
  renderMembers(rep);
  renderExpiring(rep.expiring_certs || []);
  renderTerms(ov.terms);
  renderEvents(ov.events, ov.events_error);
  renderChart(ov.terms);
  renderLoss(ov.runs);
}

function stat(label, value, field) {
  const b = el("b", { "data-field": field }, value);
  return el("span", {}, label + " ", b);
}

function renderRuns(runs) {
  const box = $("runs");
  box.replaceChildren();
  if (!runs.length) { box.append(el("p", { class: "muted" }, "no runs yet")); return; }
  for (const r of runs) {
    const total = Math.max(r.total, 1);
    const bar = el("div", { class: "bar" });
    for (const [cls, n] of [["done", r.done], ["dead", r.dead], ["running", r.running]]) {
      const s = el("span", { class: cls });
      s.style.width = (100 * n / total).toFixed(2) + "%";
      bar.append(s);
    }
    const pct = r.total ? (100 * (r.done + r.dead) / r.total).toFixed(1) + "%" : "–";
    // A run whose model no live worker serves waits (it stays active); a
    // run stalled on a missing input object says which; a run isolated
    // because its store cannot be reached says so.
    const stallSince = r.stall && r.stall.since_unix_ms ? " (since " + new Date(r.stall.since_unix_ms).toISOString().replace(".000Z", "Z") + ")" : "";
    const stalled = !r.stall ? ""
      : r.stall.store_unreachable ? "store unreachable" + stallSince
      : "stalled: input object " + r.stall.object + " missing" + stallSince;
    // A run handed to a peer cluster names it (and the remote run); a
    // handle the peer has not accepted, refused or lost says so.
    const remote = r.cluster && r.cluster !== "local";
    const handle = !remote ? ""
      : r.handle_state === "pending" ? "handing off to " + r.cluster
      : r.handle_state === "refused" ? "refused by " + r.cluster
      : r.handle_state === "lost" ? "lost on " + r.cluster : "";
    const state = r.cancelled ? el("span", { class: "badge", "data-field": "state" }, "cancelled")
      : r.finished ? el("span", { class: "badge ok", "data-field": "state" }, "finished")
      : handle ? el("span", { class: "badge bad", "data-field": "state", title: handle }, r.handle_state === "pending" ? "handing off" : r.handle_state)
      : r.stall ? el("span", { class: "badge bad", "data-field": "state", title: stalled + ": " + r.stall.reason }, "stalled")
      : r.unserved_model ? el("span", { class: "badge bad", "data-field": "state", title: "no live worker serves model " + r.model }, "waiting")
      : el("span", { class: "badge", "data-field": "state" }, "running");
    const head = el("div", { class: "run-head" },
      el("span", { class: "run-name", "data-field": "name" }, r.name),
      el("span", { class: "badge" }, r.kind),
      el("span", { class: "badge" + (remote ? " peer" : ""), "data-field": "cluster", title: remote ? "handed to cluster " + r.cluster + " as " + (r.remote_run || "?") : "runs on this cluster" }, r.cluster || "local"),
      r.tenant ? el("span", { class: "badge tenant", "data-field": "tenant", title: "tenant" }, r.tenant) : "",
      r.priority ? el("span", { class: "badge prio", "data-field": "priority", title: "priority (1 lowest, 5 highest)" }, "p" + r.priority) : "",
      r.model ? el("span", { class: "badge", "data-field": "model" }, r.model) : "",
      state,
      el("span", { class: "big" }, el("span", { "data-field": "done" }, r.done), " / ", el("span", { "data-field": "total" }, r.total)),
      el("span", { class: "muted" }, pct),
      el("span", {}, "rate ", el("b", { "data-field": "rate" }, r.finished ? "–" : fmtRate(r.rate_per_sec) + "/s")),
      el("span", {}, "ETA ", el("b", { "data-field": "eta" }, r.finished ? "done" : fmtDur(r.eta_seconds))),
      r.finished ? "" : el("span", { title: "its part of the items running now" }, "share ", el("b", { "data-field": "share" }, fmtPct(r.share))));
    const stats = el("div", { class: "stats" },
      stat("pending", fmtNum(r.pending), "pending"),
      stat("blocked", fmtNum(r.blocked), "blocked"),
      stat("running", fmtNum(r.running), "running"),
      stat("running long", fmtNum(r.running_long), "running_long"),
      stat("owner lost", fmtNum(r.owner_lost), "owner_lost"),
      stat("dead", fmtNum(r.dead), "dead"),
      stat("cancelled", fmtNum(r.cancelled_items || 0), "cancelled_items"),
      stat("failed attempts", fmtNum(r.failures), "failures"));
    if (r.finished && r.created_unix_ms && r.finished_unix_ms) {
      stats.append(stat("took", fmtDur((r.finished_unix_ms - r.created_unix_ms) / 1000), "took"));
    }
    const parts = [head, bar, stats];
    if (r.stall && !r.cancelled) {
      parts.push(el("p", { class: "warn", "data-field": "stalled", title: r.stall.reason }, stalled));
    }
    if (handle) {
      parts.push(el("p", { class: "warn", "data-field": "handle" }, handle + (r.handle_reason ? ": " + r.handle_reason : "")));
    }
    if (r.unserved_model && !r.finished && !r.cancelled) {
      parts.push(el("p", { class: "warn", "data-field": "unserved" }, "waiting: no live worker serves model " + r.model));
    }
    box.append(el("div", { class: "run", "data-run": r.name }, ...parts));
  }
}

function fmtPct(f) { return (100 * (f || 0)).toFixed(1) + "%"; }

// renderTenants draws a row per tenant: its weight and quotas (from the
// ledger's tenant records, "–" when they could not be read), its active
// runs' priorities, its items and its share of the fleet now.
function renderTenants(ts, err) {
  const p = $("tenants-error");
  p.hidden = !err;
  p.textContent = err ? "tenant records unavailable (weights, quotas, usage): " + err : "";
  const tb = $("tenants").tBodies[0];
  tb.replaceChildren();
  for (const t of ts) {
    const bar = el("div", { class: "bar share" });
    const fill = el("span", { class: "running" });
    fill.style.width = (100 * Math.min(Math.max(t.share, 0), 1)).toFixed(1) + "%";
    bar.append(fill);
    const quotas = [];
    if (t.max_queued) quotas.push("queued ≤ " + fmtNum(t.max_queued));
    if (t.max_running) quotas.push("running ≤ " + fmtNum(t.max_running));
    tb.append(el("tr", { "data-tenant": t.name },
      el("td", { "data-field": "name" }, t.name || "(none)"),
      el("td", { class: "num", "data-field": "weight" }, t.known ? t.weight : "–"),
      el("td", { "data-field": "priorities" }, t.priorities.length ? t.priorities.map((x) => "p" + x).join(" ") : "–"),
      el("td", { class: "num", "data-field": "runs" }, t.active + " / " + t.runs),
      el("td", { class: "num", "data-field": "queued" }, fmtNum(t.pending)),
      el("td", { class: "num", "data-field": "running" }, fmtNum(t.running)),
      el("td", { class: "num", "data-field": "done" }, fmtNum(t.done)),
      el("td", { "data-field": "share" }, el("div", { class: "share-cell" }, bar, el("span", {}, fmtPct(t.share)))),
      el("td", { class: "num", "data-field": "rate" }, t.active ? fmtRate(t.rate_per_sec) : "–"),
      el("td", { class: "num", "data-field": "usage" }, t.known ? fmtRate(t.usage) : "–"),
      el("td", { "data-field": "quotas" }, t.known ? (quotas.length ? quotas.join(", ") : "none") : "–")));
  }
  if (!ts.length) tb.append(el("tr", {}, el("td", { class: "muted", colspan: "11" }, "no tenants yet")));
}

// renderFederation draws a row per peer cluster (federation): hidden when
// the cluster has none.
function renderFederation(name, peers, nowMs) {
  $("federation-section").hidden = peers.length === 0;
  $("cluster-name").textContent = name ? "this cluster: " + name : "";
  const tb = $("federation").tBodies[0];
  tb.replaceChildren();
  for (const p of peers) {
    const reach = el("span", { class: "badge " + (p.reachable ? "ok" : "bad") }, p.reachable ? "yes" : "no");
    const models = p.all_models ? "any" : (p.models && p.models.length ? p.models.join(", ") : "–");
    const cert = p.cert_not_after_unix_ms ? new Date(p.cert_not_after_unix_ms).toISOString().replace(".000Z", "Z") : "–";
    tb.append(el("tr", { "data-peer": p.name },
      el("td", { "data-field": "name" }, p.name),
      el("td", { "data-field": "reachable" }, reach),
      el("td", { "data-field": "leader" }, p.leader_id || "–"),
      el("td", { class: "num", "data-field": "term" }, p.term || "–"),
      el("td", { "data-field": "models" }, models),
      el("td", { "data-field": "stores" }, p.stores && p.stores.length ? p.stores.join(", ") : "–"),
      el("td", { class: "num", "data-field": "skew" }, p.last_poll_unix_ms ? (p.clock_skew_ms >= 0 ? "+" : "") + p.clock_skew_ms + " ms" : "–"),
      el("td", { class: "num", "data-field": "runs" }, p.active + " / " + p.handles),
      el("td", { "data-field": "poll" }, p.last_poll_unix_ms ? ago(Math.max(nowMs - p.last_poll_unix_ms, 0)) : "never"),
      el("td", { "data-field": "cert", class: p.cert_expiring ? "warn" : "" }, cert),
      el("td", { "data-field": "error", class: "muted" }, p.last_error || "–")));
  }
}

function renderWorkers(ws) {
  $("worker-count").textContent = ws.length;
  const tb = $("workers").tBodies[0];
  tb.replaceChildren();
  for (const w of ws) {
    let badge;
    if (w.lost) badge = el("span", { class: "badge lost" }, "lost");
    else if (w.owner_lost > 0) badge = el("span", { class: "badge bad" }, "owner lost");
    else if (w.running_long > 0) badge = el("span", { class: "badge long" }, "running long");
    else badge = el("span", { class: "badge ok" }, "ok");
    const tr = el("tr", { "data-worker": w.id, class: w.lost ? "lost" : "" },
      el("td", {}, w.id), el("td", { "data-field": "models" }, w.models && w.models.length ? w.models.join(", ") : "any"),
      el("td", { class: "num" }, w.running), el("td", { class: "num" }, w.on_time),
      el("td", { class: "num" }, w.running_long), el("td", { class: "num" }, w.owner_lost),
      el("td", { class: "num" }, w.backlog), el("td", { class: "num" }, fmtRate(w.items_per_sec)),
      el("td", { class: "num" }, fmtNum(w.completed)), el("td", {}, ago(w.heartbeat_age_ms)), el("td", {}, badge));
    tb.append(tr);
  }
}

function renderMembers(rep) {
  const tb = $("members").tBodies[0];
  tb.replaceChildren();
  for (const m of rep.members) {
    // The role a member reports itself; without its answer, unreachable
    // (or, when members are not asked, this replica's idea of the leader).
    let role;
    if (m.reachable) role = el("span", { class: "badge " + m.state, "data-field": "role" }, m.state);
    else if (m.error) role = el("span", { class: "badge lost", "data-field": "role", title: m.error }, "unreachable");
    else role = el("span", { class: "badge " + (m.leader ? "leader" : "follower"), "data-field": "role" }, m.leader ? "leader" : "follower");
    tb.append(el("tr", { "data-member": m.id, class: m.self ? "self" : "" },
      el("td", {}, m.id), el("td", {}, role),
      el("td", { class: "num" }, m.reachable ? m.term : "–"), el("td", { class: "num" }, m.reachable ? m.applied_index : "–"),
      el("td", {}, m.suffrage), el("td", {}, m.grpc_addr || "–"), el("td", {}, m.raft_addr)));
  }
  $("members-note").textContent = rep.error ? "local view unavailable: " + rep.error
    : "configuration as this replica sees it · role and term as each reports";
}

function renderTerms(terms) {
  const tb = $("terms").tBodies[0];
  tb.replaceChildren();
  for (const t of terms.slice().reverse()) {
    tb.append(el("tr", { "data-term": t.term },
      el("td", {}, t.term), el("td", {}, t.leader || "–"),
      el("td", { title: t.source === "event" ? "from the ledger's LEADER_ELECTED event" : "seen by this dashboard" },
        fmtTime(t.unix_ms) + (t.source === "event" ? "" : " (seen)"))));
  }
}

function eventText(e) {
  const items = (n) => n + (n === 1 ? " item" : " items");
  const parts = [];
  switch (e.kind) {
    case "items_stolen":
      parts.push("worker " + e.worker + " stole " + items(e.count) + (e.detail ? " from " + e.detail : ""));
      if (e.run) parts.push("run " + e.run);
      return parts.join(" · ");
    case "worker_expired":
    case "worker_deregistered":
    case "worker_evicted":
      parts.push("worker " + e.worker);
      if (e.detail) parts.push(e.detail);
      if (e.count) parts.push(items(e.count) + " back to pending");
      return parts.join(" · ");
    case "conns_refused":
    case "leader_stepped_aside":
      // The detail names the listener, the reasons and the top source,
      // or why and to whom.
      parts.push("replica " + e.member);
      if (e.detail) parts.push(e.detail);
      return parts.join(" · ");
  }
  if (e.run) parts.push("run " + e.run);
  if (e.worker) parts.push("worker " + e.worker);
  if (e.member) parts.push("replica " + e.member);
  if (e.count) parts.push(items(e.count));
  if (e.detail) parts.push(e.detail);
  return parts.join(" · ");
}

function renderEvents(evs, err) {
  const p = $("events-error");
  p.hidden = !err;
  p.textContent = err ? "events unavailable: " + err : "";
  const ol = $("events");
  ol.replaceChildren();
  for (const e of evs.slice(0, 100)) {
    ol.append(el("li", { "data-seq": e.seq },
      el("span", { class: "t" }, fmtTime(e.unix_ms)),
      el("span", { class: "k " + e.kind }, e.kind.replace(/_/g, " ")),
      el("span", { class: "muted" }, "t" + e.term),
      el("span", {}, eventText(e))));
  }
  if (!evs.length && !err) ol.append(el("li", { class: "muted" }, "no events yet"));
}

// lineChart draws series ([{xs, ys, cls}]) into a fresh SVG of w×h.
function frame(w, h) {
  return svg("svg", { viewBox: "0 0 " + w + " " + h, preserveAspectRatio: "none", role: "img" });
}

function renderChart(terms) {
  const box = $("chart");
  const W = 1000, H = 220, L = 48, R = 10, T = 12, B = 24;
  const s = frame(W, H);
  s.setAttribute("preserveAspectRatio", "xMidYMid meet");
  if (points.length < 2) {
    s.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "label" }, "collecting samples…"));
    box.replaceChildren(s);
    return;
  }
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  const span = Math.max(t1 - t0, 1);
  let ymax = 1;
  for (const p of points) if (p.ok) ymax = Math.max(ymax, p.rate);
  ymax = niceMax(ymax);
  const x = (t) => L + (W - L - R) * (t - t0) / span;
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  s.append(svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }));
  for (const f of [0.5, 1]) {
    s.append(svg("line", { x1: L, y1: y(ymax * f), x2: W - R, y2: y(ymax * f), class: "axis" }));
    s.append(svg("text", { x: L - 6, y: y(ymax * f) + 4, "text-anchor": "end", class: "label" }, fmtRate(ymax * f)));
  }
  s.append(svg("text", { x: L - 6, y: y(0) + 4, "text-anchor": "end", class: "label" }, "0"));
  s.append(svg("text", { x: L, y: H - 6, class: "label" }, fmtTime(t0)));
  s.append(svg("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "label" }, fmtTime(t1)));
  // gaps: samples where no leader could be read
  for (const p of points) {
    if (!p.ok) s.append(svg("rect", { x: x(p.t) - 3, y: T, width: 6, height: H - T - B, class: "gap" }));
  }
  let d = "", area = "", started = false, firstX = 0, lastX = 0;
  for (const p of points) {
    if (!p.ok) { if (started) { area += "L" + lastX + "," + y(0) + "L" + firstX + "," + y(0) + "Z"; } started = false; continue; }
    const px = x(p.t).toFixed(1), py = y(p.rate).toFixed(1);
    if (!started) { d += "M" + px + "," + py; area += "M" + px + "," + y(0) + "L" + px + "," + py; firstX = px; started = true; }
    else { d += "L" + px + "," + py; area += "L" + px + "," + py; }
    lastX = px;
  }
  if (started) area += "L" + lastX + "," + y(0) + "L" + firstX + "," + y(0) + "Z";
  s.append(svg("path", { d: area, class: "area" }));
  s.append(svg("path", { d: d, class: "line" }));
  for (const t of terms) {
    if (t.unix_ms < t0 || t.unix_ms > t1) continue;
    const tx = x(t.unix_ms);
    s.append(svg("line", { x1: tx, y1: T, x2: tx, y2: H - B, class: "term" }));
    s.append(svg("text", { x: tx + 4, y: T + 10, class: "termlabel" }, (t.leader || "?") + " · term " + t.term));
  }
  box.replaceChildren(s);
}

function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function renderLoss(runs) {
  const train = runs.filter((r) => r.loss && r.loss.length);
  $("loss-section").hidden = !train.length;
  const box = $("loss");
  box.replaceChildren();
  for (const r of train) {
    const W = 1000, H = 200, L = 48, R = 10, T = 12, B = 24;
    const s = frame(W, H);
    s.setAttribute("preserveAspectRatio", "xMidYMid meet");
    const pts = r.loss;
    const s0 = pts[0].step, s1 = pts[pts.length - 1].step;
    let lmax = 0;
    for (const p of pts) lmax = Math.max(lmax, p.loss);
    lmax = niceMax(Math.max(lmax, 1e-9));
    const x = (st) => L + (W - L - R) * (s1 === s0 ? 0 : (st - s0) / (s1 - s0));
    const yl = (v) => T + (H - T - B) * (1 - v / lmax);
    const ya = (v) => T + (H - T - B) * (1 - v);
    let dl = "", da = "";
    pts.forEach((p, i) => {
      dl += (i ? "L" : "M") + x(p.step).toFixed(1) + "," + yl(p.loss).toFixed(1);
      da += (i ? "L" : "M") + x(p.step).toFixed(1) + "," + ya(Math.min(Math.max(p.accuracy, 0), 1)).toFixed(1);
    });
    s.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
    s.append(svg("text", { x: L - 6, y: T + 4, "text-anchor": "end", class: "label" }, String(lmax)));
    s.append(svg("text", { x: L, y: H - 6, class: "label" }, "step " + s0));
    s.append(svg("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "label" }, "step " + s1));
    s.append(svg("path", { d: dl, class: "loss" }));
    s.append(svg("path", { d: da, class: "acc" }));
    const last = pts[pts.length - 1];
    box.append(el("div", { class: "run", "data-loss-run": r.name },
      el("div", { class: "run-head" }, el("span", { class: "run-name" }, r.name),
        el("span", {}, "step ", el("b", { "data-field": "step" }, last.step)),
        el("span", {}, "loss ", el("b", { "data-field": "loss" }, last.loss.toFixed(4))),
        el("span", {}, "accuracy ", el("b", { "data-field": "accuracy" }, (100 * last.accuracy).toFixed(1) + "%")),
        el("span", { class: "muted small" }, "orange: loss · green: accuracy")),
      el("div", { class: "chart" }, s)));
  }
}

poll();
