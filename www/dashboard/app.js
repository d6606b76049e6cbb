// The ternflow dashboard: draws what `GET /v1/dashboard` returns (a history of stats samples the
// server keeps, the worker table, alerts), the dead-letter queue (`GET /v1/dlq`, redrive) and a
// semantic search (`POST /v1/search`). Every data call carries the admin token, which lives only
// in this page's URL fragment (`#token=…`): browsers never send a fragment, so it is in no request
// line and no log. Charts are uPlot (vendored from npm, see vendor/LICENSE).
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const WINDOW_S = 15 * 60;
let token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
let lastT = 0;
let samples = [];
let charts = {};
let lastOk = 0;

async function api(method, path, body) {
  const r = await fetch(path, {
    method,
    headers: { authorization: "Bearer " + token, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await r.json().catch(() => null);
  if (!r.ok) {
    const e = new Error((json && json.error && json.error.message) || r.status + " " + r.statusText);
    e.status = r.status;
    throw e;
  }
  return json;
}

const fmt = (v, d = 1) => (v == null || Number.isNaN(v) ? "–" : Number(v).toFixed(d));
const pct = (v) => (v == null ? "–" : (100 * v).toFixed(1) + " %");
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const ago = (t, now) => {
  const s = Math.max(0, (now - t) / 1000);
  return s < 60 ? s.toFixed(0) + " s ago" : (s / 60).toFixed(1) + " min ago";
};
const breaker = (v) => (v === 1 ? ["open", "state-open"] : v === 2 ? ["half-open", "state-half"] : ["closed", "state-closed"]);

// --- charts -------------------------------------------------------------------------------
const COLORS = ["#4fb3ff", "#3fb950", "#d29922", "#f85149", "#bc8cff"];
const CHARTS = {
  queue: { el: "c-queue", series: [["ready", (s) => s.ready], ["leased", (s) => s.leased], ["delayed", (s) => s.delayed], ["dead", (s) => s.dead]] },
  rate: { el: "c-rate", series: [["jobs/s", (s) => s.jobs_per_s]] },
  hits: { el: "c-hits", pct: true, series: [["local", (s) => s.local_hit_ratio], ["remote", (s) => s.remote_hit_ratio]] },
  share: { el: "c-share", pct: true, series: [["engine", (s) => s.engine_share], ["backend", (s) => (s.engine_share == null ? null : 1 - s.engine_share)]] },
  job: { el: "c-job", series: [["p50", (s) => s.job_p50_ms], ["p99", (s) => s.job_p99_ms]] },
  engine: { el: "c-engine", series: [["p50", (s) => s.engine_p50_ms], ["p99", (s) => s.engine_p99_ms]] },
};

function chartData(spec) {
  const xs = samples.map((s) => s.t / 1000);
  return [xs, ...spec.series.map(([, f]) => samples.map((s) => {
    const v = f(s);
    return v == null ? null : spec.pct ? 100 * v : v;
  }))];
}

function makeCharts() {
  for (const [name, spec] of Object.entries(CHARTS)) {
    const el = $(spec.el);
    const opts = {
      width: el.clientWidth || 400,
      height: 170,
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: spec.pct ? { range: [0, 100] } : { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [
        { stroke: "#8b98a5", grid: { stroke: "#263039" }, ticks: { stroke: "#263039" } },
        { stroke: "#8b98a5", grid: { stroke: "#263039" }, ticks: { stroke: "#263039" }, size: 50,
          values: (u, vals) => vals.map((v) => (spec.pct ? v + "%" : v)) },
      ],
      series: [{}, ...spec.series.map(([label], i) => ({
        label, stroke: COLORS[i], width: 2, points: { show: false }, spanGaps: false,
        fill: name === "queue" && i === 0 ? "rgba(79,179,255,0.12)" : undefined,
      }))],
    };
    charts[name] = new uPlot(opts, chartData(spec), el);
  }
  addEventListener("resize", () => {
    for (const [name, spec] of Object.entries(CHARTS)) charts[name].setSize({ width: $(spec.el).clientWidth, height: 170 });
  });
}

function drawCharts() {
  for (const [name, spec] of Object.entries(CHARTS)) charts[name].setData(chartData(spec));
}

// --- tiles, workers, alerts ----------------------------------------------------------------
// The latest value of `key` in the last minute's samples (an idle second has none).
function latest(key) {
  for (let i = samples.length - 1; i >= 0 && i >= samples.length - 60; i--) if (samples[i][key] != null) return samples[i][key];
  return null;
}

function tiles(d) {
  const c = d.counters;
  const acked = (c.acked_engine || 0) + (c.acked_backend || 0) + (c.acked_local || 0) + (c.acked_remote || 0);
  const hit = acked ? ((c.acked_local || 0) + (c.acked_remote || 0)) / acked : null;
  const items = [
    ["ready", d.queue.ready], ["leased", d.queue.leased], ["delayed", d.queue.delayed], ["dead letters", d.queue.dead],
    ["jobs/s now", fmt(latest("jobs_per_s"))], ["jobs/s, last minute", fmt(d.ack_rate)], ["acked since start", c.jobs_acked],
    ["cache hits since start", pct(hit)], ["job p50 / p99 (ms), latest", fmt(latest("job_p50_ms"), 0) + " / " + fmt(latest("job_p99_ms"), 0)],
    ["workers", d.workers.length], ["retries", c.jobs_retried], ["locks held / leaked", c.locks_held + " / " + c.lock_leaked],
  ];
  $("tiles").innerHTML = items.map(([l, v]) => `<div class="tile"><div class="v">${esc(v ?? "–")}</div><div class="l">${esc(l)}</div></div>`).join("");
}

function workers(d) {
  $("worker-count").textContent = `(${d.workers.length})`;
  $("workers").tBodies[0].innerHTML = d.workers.map((w) => {
    const g = w.gauges || {}, c = w.counters || {};
    const [eb, ec] = breaker(g.engine_breaker), [bb, bc] = breaker(g.backend_breaker);
    const who = w.quarantined ? `<span class="state-open">${esc(w.sub)} · quarantined</span>` : esc(w.sub);
    return `<tr><td>${esc(w.worker)}</td><td>${who}</td><td>${esc(w.runtime)}</td><td class="num">${fmt(g.in_flight, 0)}</td>
      <td class="num">${fmt(g.processing_rate)}</td><td class="num">${c.jobs_done ?? 0}</td>
      <td class="num">${c.cache_local_hits ?? 0} / ${c.cache_remote_hits ?? 0}</td>
      <td class="${ec}">${eb}</td><td class="${bc}">${bb}</td><td>${ago(w.last_seen, d.now)}</td></tr>`;
  }).join("") || `<tr><td colspan="10" class="muted">no worker has reported in the last 5 minutes</td></tr>`;
}

function tenants(d) {
  const ts = d.tenants || [];
  $("tenant-count").textContent = `(${ts.length} open)`;
  $("tenants").tBodies[0].innerHTML = ts.map((t) => {
    const c = t.counters || {}, q = t.quotas || {};
    return `<tr><td>${esc(t.name)}</td><td class="num">${t.workers}</td><td class="num">${c.jobs_enqueued ?? 0}</td>
      <td class="num">${c.jobs_acked ?? 0}</td><td class="num">${t.cache_bytes} / ${q.max_cache_bytes}</td>
      <td class="num">${c.embed_tokens ?? 0}</td><td class="num">${c.quota_refused ?? 0}</td>
      <td>${q.max_queue} · ${q.max_workers} · ${q.embed_tokens_per_min} · ${q.max_cache_bytes}</td></tr>`;
  }).join("") || `<tr><td colspan="8" class="muted">no signed tenant is open</td></tr>`;
}

function alerts(d) {
  $("alerts").hidden = d.alerts.length === 0;
  $("alert-list").innerHTML = d.alerts.slice(-10).reverse()
    .map((a) => `<li class="${esc(a.kind)}">${new Date(a.t).toLocaleTimeString()} · ${esc(a.kind)}: ${esc(a.message)}</li>`).join("");
}

// --- dead letters -------------------------------------------------------------------------
async function dlq() {
  const { entries } = await api("GET", "/v1/dlq?limit=50");
  $("dlq-count").textContent = `(${entries.length}${entries.length === 50 ? "+" : ""})`;
  $("dlq").tBodies[0].innerHTML = entries.map((e) => {
    const hist = (e.history || []).map((h) => `<li>attempt ${h.attempt} on ${esc(h.worker)}${h.sub ? " (token " + esc(h.sub) + ")" : ""}: ${esc(h.error ? h.error.code + ": " + h.error.message : "")}</li>`).join("");
    return `<tr><td>${esc(e.job.id)}</td><td>${esc(e.job.text.slice(0, 80))}</td>
      <td><b>${esc(e.error.code)}</b> ${esc(e.error.message)}</td>
      <td><details><summary>${(e.history || []).length} attempt(s)</summary><ul>${hist}</ul></details></td>
      <td>${new Date(e.dead_at).toLocaleTimeString()}</td>
      <td><button data-redrive="${esc(e.job.id)}">Redrive</button></td></tr>`;
  }).join("") || `<tr><td colspan="6" class="muted">no dead letters</td></tr>`;
}
$("dlq").addEventListener("click", async (ev) => {
  const id = ev.target.dataset && ev.target.dataset.redrive;
  if (!id) return;
  ev.target.disabled = true;
  try { await api("POST", `/v1/dlq/${encodeURIComponent(id)}/redrive`); } catch (e) { alert("redrive: " + e.message); }
  await dlq();
});

// --- search -------------------------------------------------------------------------------
$("search").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const query = $("q").value.trim();
  if (!query) return;
  $("search-meta").textContent = "searching…";
  try {
    const r = await api("POST", "/v1/search", { query, k: Number($("k").value) || 5 });
    $("search-meta").textContent = `${r.scored} vectors scored in ${r.took_ms.toFixed(0)} ms (model ${r.model_id})`;
    $("hits").innerHTML = r.hits.map((h) => `<li><span class="score">${h.score.toFixed(3)}</span>` +
      `<span class="bar" style="width:${Math.max(2, 120 * h.score).toFixed(0)}px"></span>${esc(h.text)} ` +
      `<span class="src">(${esc(h.id.slice(0, 12))}, ${esc(h.source)})</span></li>`).join("");
  } catch (e) {
    $("search-meta").textContent = "search failed: " + e.message;
  }
});

// --- the loop -----------------------------------------------------------------------------
async function tick() {
  try {
    const d = await api("GET", "/v1/dashboard?since=" + lastT);
    samples.push(...d.samples);
    if (d.samples.length) lastT = d.samples[d.samples.length - 1].t;
    const cutoff = d.now / 1000 - WINDOW_S;
    while (samples.length && samples[0].t / 1000 < cutoff) samples.shift();
    $("meta").textContent = `${location.host} · model ${d.model_id || "none"} · a sample every ${d.sample_ms} ms`;
    tiles(d);
    workers(d);
    tenants(d);
    alerts(d);
    drawCharts();
    lastOk = Date.now();
    $("live").className = "live";
    $("live").textContent = `live · ${new Date(d.now).toLocaleTimeString()}`;
    document.body.dataset.samples = String(samples.length);
  } catch (e) {
    $("live").className = "live off";
    $("live").textContent = "offline: " + e.message;
    if (e.status === 401 || e.status === 403) return showLogin(e.message);
  }
  setTimeout(tick, POLL_MS);
}

function showLogin(msg) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = msg || "";
}
$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  history.replaceState(null, "", "#token=" + encodeURIComponent(token));
  start();
});

let dlqTimer = null;
function start() {
  if (!token) return showLogin();
  $("login").hidden = true;
  $("main").hidden = false;
  if (!Object.keys(charts).length) makeCharts();
  tick();
  if (!dlqTimer) {
    const loop = async () => { try { await dlq(); } catch {} dlqTimer = setTimeout(loop, 3000); };
    loop();
  }
}
start();
