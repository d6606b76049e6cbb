// A noisy neighbour (the fairness figure): one `ternflow serve` (a fresh embedded store in a
// temporary --data-dir, or a Redis URL with a fresh --redis-prefix), signed HS256 tokens, two
// tenants. Tenant `quiet` runs a steady load: a producer enqueues --rate jobs/s (every job a
// unique id; texts cycled from 64 distinct texts whose true vectors are fetched once with
// POST /v1/embed before the run, so acks pass the server's verification) and --workers workers
// each loop: claim (wait_ms 1000, max 8) → one batch ack of what they got. Measured per job:
// claim → ack (the claim's response to the ack's response) and enqueue → ack (the enqueue's
// request to the ack's response), and the jobs done per second, over --secs seconds:
//   warm-up  the quiet load alone for --warmup s, not measured (the workers' probation: the
//            server recomputes every result of a new identity first)
//   A        the quiet load alone
//   B        the same quiet load while tenant `noisy` floods, from a node process of its own
//            (so the flood does not delay the quiet load's event loop), with --noisy-tokens worker
//            tokens of their own `sub`s: --claims concurrent long-poll claims (wait_ms 30000) on
//            its empty queue, --streams SSE streams held open and read, --embeds concurrent
//            POST /v1/embed of long texts, sent again as soon as answered, --metric-loops loops
//            of POST /v1/metrics over --metric-names worker names (at most --metric-rate a second
//            in all, 0 for as fast as answers come), and --idle TCP connections
//            that never send a byte (each opened again a second after the server closes it),
//            all from the loopback address --noisy-addr (default 127.0.0.2; the quiet load comes
//            from 127.0.0.1: two clients, as two tenants' would be, for the server's per-address
//            limits). A refused request is sent again after --noisy-backoff-ms. Every answer the
//            noisy tenant gets is counted: 2xx, 429, 403, other statuses, connection refused,
//            other network errors.
// With --rounds R (default 1) A and B alternate R times (A B A B …) and each label's samples are
// pooled: the figures then hold against the machine's drift and noise.
// Prints phase A and B side by side (quiet jobs/s, p50 and p99 claim → ack, p99 enqueue → ack,
// the server's CPU and peak RSS / descriptors) with the ratio B/A, the CPU of both clients (on a
// small machine the flooding client takes CPU from the server and the quiet client: read the
// quiet client's event-loop delay next to its latencies), then "GOAL MET" when in B the
// quiet p99 claim → ack is at most 10 % above A's (plus --slack-ms), its jobs/s at least 90 % of
// A's, and no quiet request was refused; "GOAL NOT MET" otherwise (exit status 1 with --strict).
// Usage: node bench/noisy.mjs [--bin BIN] [--model FILE] [--store embedded|redis://HOST:PORT/DB]
//          [--rate R] [--workers W] [--secs S] [--warmup S] [--claims N] [--streams N]
//          [--embeds N] [--embed-texts N] [--metric-names N] [--metric-loops N] [--metric-rate N]
//          [--idle N] [--noisy-tokens N] [--noisy-backoff-ms MS] [--noisy-addr IP] [--slack-ms MS]
//          [--rounds R] [--noisy-nice N] [--serve-arg X]... [--strict]
//   --noisy-nice N runs the flooding client at nice N: on a small machine it then takes less of
//   the CPU the server and the quiet client share with it (a flooding neighbour on a machine of
//   its own takes none)
//   defaults: --rate 100 --workers 2 --secs 20 --warmup 3 --claims 200 --streams 100 --embeds 16
//             --embed-texts 4 --metric-names 2000 --metric-loops 4 --metric-rate 200 --idle 500
//             --noisy-tokens 4 --noisy-backoff-ms 100 --noisy-addr 127.0.0.2 --slack-ms 0
//             --rounds 1 --noisy-nice 0; the server target/release/ternflow with models/ternlight-int4.bin and
//             the embedded store
import { fork, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { setPriority, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { connect as netConnect } from "node:net";
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { freePort, minter, root, sleep } from "../scripts/harness.mjs";

const log = (...a) => console.log(...a);

// What a failed fetch was: the connection refused, or another network error (by its code).
const netKind = (e) => {
  const code = e?.cause?.code ?? e?.code ?? e?.name ?? "error";
  return code === "ECONNREFUSED" ? "refused" : `neterr ${code}`;
};

// The same file runs the noisy tenant, in a process of its own (bench/noisy.mjs --flood-child).
if (process.argv[2] === "--flood-child") {
  process.on("disconnect", () => process.exit(0)); // the parent is gone
  await flood(await new Promise((r) => process.once("message", r)));
}
else await main();

// =================================================================================================
// The noisy tenant (a child process): floods until told to stop, then reports what it got.
// =================================================================================================
async function flood(cfg) {
  const { port, tokens, longText } = cfg;
  const t0 = performance.now();
  let running = true;
  // node:http rather than fetch: its connections can come from another loopback address
  // (--noisy-addr), as a neighbour's would, so per-address limits do not mix the two tenants.
  const agent = new HttpAgent({ keepAlive: true, maxSockets: Infinity, localAddress: cfg.localAddress });
  const live = new Set(); // requests under way, destroyed on stop
  const stats = {}; // part → { answer → count }
  const count = (part, what) => { const s = (stats[part] ??= {}); s[what] = (s[what] ?? 0) + 1; };
  const statusKind = (st) => (st >= 200 && st < 300 ? "2xx" : String(st));
  const tok = (i) => tokens[i % tokens.length];
  const extra = { sseBytes: 0, sseClosed: 0, idleConnected: 0, idleClosed: 0, embedTexts: 0 };
  // One request; `each` sees the status (chunk null), then the body's chunks. Resolves with the status once the body ended.
  const request = (method, path, token, body, each = () => {}) => new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : null;
    const req = httpRequest({
      host: "127.0.0.1", port, method, path, agent, localAddress: cfg.localAddress,
      headers: { authorization: "Bearer " + token, ...(data ? { "content-type": "application/json", "content-length": Buffer.byteLength(data) } : {}) },
    }, (res) => {
      each(res.statusCode, null);
      res.on("data", (c) => each(res.statusCode, c));
      res.on("end", () => { live.delete(req); resolve(res.statusCode); });
      res.on("aborted", () => { live.delete(req); reject(Object.assign(new Error("response aborted"), { code: "ECONNRESET" })); });
      res.on("error", (e) => { live.delete(req); reject(e); });
    });
    live.add(req);
    req.on("error", (e) => { live.delete(req); reject(e); });
    req.end(data ?? undefined);
  });
  // One request, answered or not; a refusal waits --noisy-backoff-ms before the next.
  const hit = async (part, path, token, body) => {
    try {
      const st = await request(body ? "POST" : "GET", path, token, body);
      if (!running) return null;
      count(part, statusKind(st));
      if (st < 200 || st >= 300) await sleep(cfg.backoffMs);
      return st;
    } catch (e) {
      if (!running) return null;
      count(part, netKind(e));
      await sleep(cfg.backoffMs);
      return null;
    }
  };
  const loops = [];
  // Long polls on an empty queue.
  for (let i = 0; i < cfg.claims; i++) loops.push((async () => {
    while (running) await hit("claim", "/v1/jobs/claim", tok(i), { worker: `noisy-claimer-${i}`, max: 1, wait_ms: 30000 });
  })());
  // Event streams, held open and read; opened again when closed.
  for (let i = 0; i < cfg.streams; i++) loops.push((async () => {
    while (running) {
      try {
        const st = await request("GET", "/v1/events", tok(i), null, (code, c) => {
          if (c === null) { if (running) count("sse", statusKind(code)); } else extra.sseBytes += c.length;
        });
        if (!running) return;
        if (st === 200) extra.sseClosed++;
        else await sleep(cfg.backoffMs);
      } catch (e) {
        if (!running) return;
        count("sse", netKind(e));
        await sleep(cfg.backoffMs);
      }
    }
  })());
  // Backend inference of long texts, as fast as answers come (each text distinct).
  let embedN = 0;
  for (let i = 0; i < cfg.embeds; i++) loops.push((async () => {
    while (running) {
      const texts = Array.from({ length: cfg.embedTexts }, () => `${embedN++} ${longText}`);
      if ((await hit("embed", "/v1/embed", tok(i), { texts })) === 200) extra.embedTexts += texts.length;
    }
  })());
  // Metrics snapshots under many worker names, at most --metric-rate a second (0: unbounded).
  let metricN = 0;
  for (let i = 0; i < cfg.metricLoops; i++) loops.push((async () => {
    while (running) {
      const n = metricN++;
      if (cfg.metricRate > 0) { const wait = t0 + (1000 * n) / cfg.metricRate - performance.now(); if (wait > 0) await sleep(wait); }
      await hit("metrics", "/v1/metrics", tok(i), {
        worker: `noisy-m-${n % cfg.metricNames}`,
        counters: { jobs_done: n, jobs_failed: 0, cache_hits: n % 7 },
        gauges: { queue_depth: n % 100, embed_ms: 12.5 },
      });
    }
  })());
  // Idle TCP connections: connect, never send; opened again when the server closes one.
  const sockets = new Set();
  const idle = () => {
    if (!running) return;
    const s = netConnect({ port, host: "127.0.0.1", localAddress: cfg.localAddress });
    let connected = false;
    sockets.add(s);
    s.on("connect", () => { connected = true; extra.idleConnected++; });
    s.on("data", () => {});
    s.on("error", (e) => { if (running) count("idle", e.code === "ECONNREFUSED" ? "refused" : `neterr ${e.code}`); });
    s.on("close", () => {
      sockets.delete(s);
      if (!running) return;
      if (connected) extra.idleClosed++;
      setTimeout(idle, 1000); // opened again a second later
    });
  };
  for (let i = 0; i < cfg.idle; i++) idle();

  const elu0 = performance.eventLoopUtilization();
  const cpu0 = process.cpuUsage();
  await new Promise((r) => process.on("message", (m) => { if (m === "stop") r(); }));
  const cpu = process.cpuUsage(cpu0);
  running = false;
  for (const r of live) r.destroy();
  for (const s of sockets) s.destroy();
  await Promise.race([Promise.allSettled(loops), sleep(3000)]);
  const elu = performance.eventLoopUtilization(elu0).utilization;
  process.send({ stats, extra, elu, cpuS: (cpu.user + cpu.system) / 1e6, secs: (performance.now() - t0) / 1000 }, () => process.exit(0));
}

// =================================================================================================
// The quiet tenant, the server and the report.
// =================================================================================================
async function main() {
  const args = {
    bin: join(root, "target/release/ternflow"), model: join(root, "models/ternlight-int4.bin"), store: "embedded",
    rate: 100, workers: 2, secs: 20, warmup: 3, claims: 200, streams: 100, embeds: 16, embedTexts: 4,
    metricNames: 2000, metricLoops: 4, metricRate: 200, idle: 500, noisyTokens: 4, backoffMs: 100, slackMs: 0, rounds: 1,
    serveArgs: [], strict: false, noisyAddr: "127.0.0.2", noisyNice: 0,
  };
  const num = { "--rate": "rate", "--workers": "workers", "--secs": "secs", "--warmup": "warmup", "--claims": "claims",
    "--streams": "streams", "--embeds": "embeds", "--embed-texts": "embedTexts", "--metric-names": "metricNames",
    "--metric-loops": "metricLoops", "--metric-rate": "metricRate", "--idle": "idle", "--noisy-tokens": "noisyTokens", "--noisy-backoff-ms": "backoffMs",
    "--slack-ms": "slackMs", "--rounds": "rounds", "--noisy-nice": "noisyNice" };
  for (let i = 2; i < process.argv.length; i++) {
    const k = process.argv[i];
    if (k === "--strict") { args.strict = true; continue; }
    if (i + 1 >= process.argv.length) throw new Error(`${k} needs a value`);
    const v = process.argv[++i];
    if (k === "--bin") args.bin = resolve(v);
    else if (k === "--model") args.model = resolve(v);
    else if (k === "--store") args.store = v;
    else if (k === "--noisy-addr") args.noisyAddr = v;
    else if (k === "--serve-arg") args.serveArgs.push(v);
    else if (num[k]) { args[num[k]] = Number(v); if (!Number.isFinite(args[num[k]]) || args[num[k]] < 0) throw new Error(`${k}: not a number ≥ 0`); }
    else throw new Error(`unknown argument ${k}`);
  }
  if (args.store !== "embedded" && !/^rediss?:\/\//.test(args.store)) throw new Error("--store is `embedded` or a redis:// URL");
  if (!(args.rate > 0) || !(args.workers >= 1) || !(args.secs > 0) || !(args.noisyTokens >= 1) || !(args.rounds >= 1)) throw new Error("--rate, --workers, --secs, --rounds and --noisy-tokens must be positive");

  const tmp = mkdtempSync(join(tmpdir(), "ternflow-noisy-"));
  const runId = randomBytes(4).toString("hex");
  const redisPrefix = `tfbench-noisy-${runId}`;
  const secret = randomBytes(32);
  const mint = minter(secret);

  // ---- the server -------------------------------------------------------------------------------
  const port = await freePort();
  const serveArgv = ["serve", "--addr", `127.0.0.1:${port}`, "--store", args.store, "--data-dir", join(tmp, "data"),
    "--model", args.model, ...(args.store === "embedded" ? [] : ["--redis-prefix", redisPrefix]), ...args.serveArgs];
  const server = spawn(args.bin, serveArgv, {
    stdio: ["ignore", "pipe", "pipe"], // its log (tracing) goes to stdout
    env: { ...process.env, TERNFLOW_JWT_KEYS: `k1:hs256:${secret.toString("base64")}`, RUST_LOG: process.env.RUST_LOG ?? "warn" },
  });
  let serverErr = "";
  let serverGone = null;
  let stopping = false;
  for (const out of [server.stdout, server.stderr]) out.on("data", (d) => { serverErr = (serverErr + d).slice(-20000); });
  // The server goes with this process, however it ends.
  process.on("exit", () => { if (serverGone === null) server.kill("SIGKILL"); });
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => process.exit(130));
  server.on("exit", (code, sig) => {
    serverGone = `${code ?? sig}`;
    if (!stopping) { console.error(`server exited (${code ?? sig}) during the run:\n${serverErr.slice(-4000)}`); process.exit(1); }
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try { if ((await fetch(base + "/healthz")).ok) break; } catch {}
    if (serverGone !== null || i > 400) { console.error("server did not start:\n" + serverErr); process.exit(1); }
    await sleep(50);
  }
  const stopServer = async () => {
    stopping = true;
    if (serverGone === null) {
      const exited = new Promise((r) => server.on("exit", r));
      server.kill("SIGTERM");
      await Promise.race([exited, sleep(15000)]);
    }
    rmSync(tmp, { recursive: true, force: true });
    if (args.store !== "embedded") {
      const del = spawnSync("sh", ["-c", `redis-cli -u "$1" --scan --pattern "$2*" | xargs -r -n 500 redis-cli -u "$1" unlink >/dev/null`, "sh", args.store, redisPrefix]);
      if (del.status !== 0) log(`# could not delete the Redis keys under ${redisPrefix}: ${del.stderr}`);
    }
  };

  // ---- the server's CPU, memory and descriptors -------------------------------------------------
  const cpuMs = () => {
    try {
      const f = readFileSync(`/proc/${server.pid}/stat`, "utf8").split(") ")[1].split(" ");
      return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, in ticks of 10 ms
    } catch { return NaN; }
  };
  const rssMiB = () => {
    try { return Number(readFileSync(`/proc/${server.pid}/status`, "utf8").match(/^VmRSS:\s+(\d+) kB/m)[1]) / 1024; } catch { return NaN; }
  };
  const fds = () => { try { return readdirSync(`/proc/${server.pid}/fd`).length; } catch { return NaN; } };
  let peaks = { rss: 0, fds: 0 };
  const sampler = setInterval(() => { peaks.rss = Math.max(peaks.rss, rssMiB()); peaks.fds = Math.max(peaks.fds, fds()); }, 1000);

  // ---- requests: JSON in and out, again on a network error --------------------------------------
  // The server closes kept-alive connections idle past its header timeout, and a pooled one may
  // be reused just as it does: a request is sent again on a network error (4 times, 100 ms apart).
  const call = async (method, path, token, body) => {
    for (let i = 0; ; i++) {
      try {
        const r = await fetch(base + path, {
          method,
          headers: { authorization: "Bearer " + token, ...(body ? { "content-type": "application/json" } : {}) },
          body: body ? JSON.stringify(body) : undefined,
          signal: AbortSignal.timeout(60000),
        });
        const text = await r.text();
        let json = null;
        try { json = text ? JSON.parse(text) : null; } catch {}
        return { status: r.status, json, code: json?.error?.code ?? (r.ok ? null : text.slice(0, 60)) };
      } catch (e) {
        if (i >= 4 || serverGone !== null) throw e;
        await sleep(100);
      }
    }
  };

  // ---- the quiet tenant's texts and their true vectors ------------------------------------------
  const corpusFile = join(root, "www/demo/corpus.txt");
  let texts = existsSync(corpusFile) ? [...new Set(readFileSync(corpusFile, "utf8").split("\n").map((s) => s.trim()).filter(Boolean))].slice(0, 64) : [];
  for (let i = texts.length; i < 64; i++) texts.push(`Quiet tenant sample text number ${i}: a short sentence about queues and leases.`);
  const quietWorkers = Array.from({ length: args.workers }, (_, i) => ({ sub: `quiet-worker-${i}` }));
  for (const w of quietWorkers) w.token = mint("worker", "quiet", w.sub);
  const producer = mint("producer", "quiet", "quiet-producer");
  const vectors = new Map();
  let modelId;
  {
    const r = await call("POST", "/v1/embed", quietWorkers[0].token, { texts });
    if (r.status !== 200) { console.error(`POST /v1/embed: ${r.status} ${JSON.stringify(r.json)}`); await stopServer(); process.exit(1); }
    modelId = r.json.model_id;
    texts.forEach((t, i) => vectors.set(t, r.json.vectors[i]));
  }
  const longFile = join(root, "bench/long.txt");
  const longText = (existsSync(longFile) ? readFileSync(longFile, "utf8") : texts.join(" ").repeat(10)).replace(/\s+/g, " ").slice(0, 8000);

  log(`# ${new Date().toISOString()} ${process.env.HOSTNAME ?? ""} ${spawnSync("nproc").stdout.toString().trim()} cores, load ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}; ulimit -n ${spawnSync("sh", ["-c", "ulimit -n"]).stdout.toString().trim()}`);
  log(`# ${args.bin} ${serveArgv.join(" ")}`);
  log(`# quiet: ${args.rate} jobs/s, ${args.workers} workers (claim wait_ms 1000, max 8), ${args.secs} s a phase, ${args.rounds} round(s) of A then B, after ${args.warmup} s of warm-up; ` +
    `noisy: ${args.claims} long polls, ${args.streams} SSE streams, ${args.embeds} embed loops × ${args.embedTexts} texts of ${longText.length} chars, ` +
    `${args.metricLoops} metrics loops over ${args.metricNames} names, ${args.idle} idle sockets, ${args.noisyTokens} tokens, client at nice ${args.noisyNice}`);

  // ---- the quiet load ---------------------------------------------------------------------------
  const jobs = new Map(); // id → { phase, t: enqueue sent }
  const newPhase = (label) => ({ label, t0: 0, t1: 0, enqueued: 0, done: 0, doneInWindow: 0, claimAck: [], enqAck: [], refused: {},
    backlog: 0, cpu: 0, clientCpu: 0, elapsed: 0, windows: 0, rss: 0, fds: 0, loopP99: 0, loop: monitorEventLoopDelay({ resolution: 5 }) });
  const phases = {};
  const refuse = (ph, what) => { if (ph) ph.refused[what] = (ph.refused[what] ?? 0) + 1; };
  let current = null; // the phase whose window is open (for refusals outside a job's phase)
  let workersStop = false;
  let jobN = 0;
  const workerLoop = async (w) => {
    while (!workersStop) {
      let c;
      try {
        c = await call("POST", "/v1/jobs/claim", w.token, { worker: w.sub, max: 8, wait_ms: 1000 });
      } catch (e) { refuse(current, `claim ${netKind(e)}`); await sleep(100); continue; }
      const tClaim = performance.now();
      if (c.status !== 200) { refuse(current, `claim ${c.status} ${c.code}`); await sleep(100); continue; }
      if (!c.json.jobs.length) continue;
      const acks = [];
      for (const j of c.json.jobs) {
        const vector = vectors.get(j.text);
        if (!vector) { refuse(jobs.get(j.id) ? phases[jobs.get(j.id).phase] : current, "claimed a job of an unknown text"); continue; }
        acks.push({ id: j.id, token: j.lease.token, result: { model_id: j.model_id || modelId, vector, source: "engine" } });
      }
      let a;
      try {
        a = await call("POST", "/v1/jobs/ack", w.token, { worker: w.sub, acks });
      } catch (e) { refuse(current, `ack ${netKind(e)}`); continue; }
      const tAck = performance.now();
      if (a.status !== 200) { refuse(current, `ack ${a.status} ${a.code}`); continue; }
      for (const res of a.json.results) {
        const job = jobs.get(res.id);
        const ph = job ? phases[job.phase] : current;
        if (res.outcome !== "done") { refuse(ph, `ack outcome ${res.outcome}${res.error?.code ? " " + res.error.code : ""}`); continue; }
        if (!job) continue;
        jobs.delete(res.id);
        ph.done++;
        ph.claimAck.push(tAck - tClaim);
        ph.enqAck.push(tAck - job.t);
        if (tAck >= ph.t0 && tAck <= ph.t1) ph.doneInWindow++;
      }
    }
  };
  const workerRuns = quietWorkers.map(workerLoop);

  // Enqueues at --rate for `secs`, then waits (at most 10 s) for the phase's jobs to be acked.
  // Rounds of one label add up.
  const runPhase = async (label, secs) => {
    const ph = (phases[label] ??= newPhase(label));
    const loop = ph.loop;
    loop.enable();
    const before = { enqueued: ph.enqueued, done: ph.done };
    const cpu0 = cpuMs();
    const self0 = process.cpuUsage();
    peaks = { rss: 0, fds: 0 };
    current = ph;
    ph.t0 = performance.now();
    ph.t1 = ph.t0 + secs * 1000;
    const inflight = new Set();
    let sent = 0;
    while (performance.now() < ph.t1) {
      const due = Math.floor(((performance.now() - ph.t0) / 1000) * args.rate) - sent;
      if (due > 0) {
        const batch = [];
        const t = performance.now();
        for (let k = 0; k < due; k++) {
          const n = jobN++;
          const id = `q-${runId}-${n}`;
          jobs.set(id, { phase: label, t });
          batch.push({ id, text: texts[n % texts.length] });
        }
        sent += due;
        const p = call("POST", "/v1/jobs", producer, { jobs: batch }).then((r) => {
          if (r.status !== 200) { refuse(ph, `enqueue ${r.status} ${r.code}`); for (const j of batch) jobs.delete(j.id); }
          else ph.enqueued += batch.length;
        }, (e) => { refuse(ph, `enqueue ${netKind(e)}`); for (const j of batch) jobs.delete(j.id); });
        inflight.add(p);
        p.finally(() => inflight.delete(p));
      }
      await sleep(2);
    }
    await Promise.all(inflight);
    const drainUntil = performance.now() + 10000;
    while ([...jobs.values()].some((j) => j.phase === label) && performance.now() < drainUntil) await sleep(20);
    const backlog = [...jobs.values()].filter((j) => j.phase === label).length;
    ph.backlog += backlog;
    for (const [id, j] of jobs) if (j.phase === label) jobs.delete(id); // not waited for again
    loop.disable();
    ph.cpu += cpuMs() - cpu0;
    const self = process.cpuUsage(self0);
    ph.clientCpu += (self.user + self.system) / 1000;
    ph.rss = Math.max(ph.rss, peaks.rss, rssMiB());
    ph.fds = Math.max(ph.fds, peaks.fds, fds());
    ph.loopP99 = Math.max(0, loop.percentile(99) / 1e6 - 5); // lateness of a 5 ms timer
    const elapsed = (performance.now() - ph.t0) / 1000;
    ph.elapsed += elapsed;
    ph.windows++;
    log(`phase ${label}: ${ph.enqueued - before.enqueued} enqueued, ${ph.done - before.done} done (${backlog} not acked 10 s after the phase), ${elapsed.toFixed(1)} s with the drain; refused so far ${JSON.stringify(ph.refused)}`);
    return ph;
  };

  // ---- the run: A then B, --rounds times (the figures of each label pooled) ---------------------
  if (args.warmup > 0) await runPhase("warm-up", args.warmup);
  const noisyTokens = Array.from({ length: args.noisyTokens }, (_, i) => mint("worker", "noisy", `noisy-worker-${i}`));
  let nr = null, fdsFlood = 0, noisyReports = 0;
  const addReport = (r) => {
    noisyReports++;
    if (!nr) { nr = r; return; }
    for (const [part, s] of Object.entries(r.stats)) for (const [k, n] of Object.entries(s)) { const t = (nr.stats[part] ??= {}); t[k] = (t[k] ?? 0) + n; }
    for (const [k, n] of Object.entries(r.extra)) nr.extra[k] = (nr.extra[k] ?? 0) + n;
    nr.elu = Math.max(nr.elu, r.elu);
    nr.cpuS += r.cpuS;
    nr.secs += r.secs;
  };
  for (let round = 0; round < args.rounds; round++) {
    await runPhase("A", args.secs);
    const noisy = fork(fileURLToPath(import.meta.url), ["--flood-child"], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    // --noisy-nice: the flooding client yields this machine's CPU, as a neighbour on another
    // machine would not take it at all (the server still gets every request it sends).
    if (args.noisyNice > 0) setPriority(noisy.pid, Math.min(19, args.noisyNice));
    noisy.send({ base, port, tokens: noisyTokens, longText, claims: args.claims, streams: args.streams, embeds: args.embeds,
      embedTexts: args.embedTexts, metricNames: args.metricNames, metricLoops: args.metricLoops, metricRate: args.metricRate,
      idle: args.idle, backoffMs: args.backoffMs, localAddress: args.noisyAddr });
    const noisyReport = new Promise((res) => { noisy.once("message", res); noisy.once("exit", () => res(null)); });
    await sleep(2000); // the flood under way: streams, long polls and idle sockets opened
    fdsFlood = Math.max(fdsFlood, fds());
    await runPhase("B", args.secs);
    noisy.send("stop");
    const r = await Promise.race([noisyReport, sleep(10000).then(() => null)]);
    if (r) addReport(r); else log("noisy tenant: no report from its process within 10 s");
    if (noisy.exitCode === null) noisy.kill("SIGKILL");
    if (round + 1 < args.rounds) await sleep(2000); // the flood's connections gone before A again
  }
  const A = phases.A, B = phases.B;
  workersStop = true;
  await Promise.race([Promise.all(workerRuns), sleep(3000)]);
  clearInterval(sampler);
  const fdsEnd = fds();
  await stopServer();

  // ---- the report -------------------------------------------------------------------------------
  const q = (xs, p) => {
    if (!xs.length) return NaN;
    const s = Float64Array.from(xs).sort();
    return s[Math.min(s.length, Math.max(1, Math.ceil(p * s.length))) - 1];
  };
  const fig = (ph) => ({
    rate: ph.doneInWindow / (args.secs * ph.windows), p50: q(ph.claimAck, 0.5), p99: q(ph.claimAck, 0.99),
    e50: q(ph.enqAck, 0.5), e99: q(ph.enqAck, 0.99), cpu: ph.cpu / 1000 / ph.elapsed,
    refused: Object.values(ph.refused).reduce((a, b) => a + b, 0) + ph.backlog,
  });
  const fa = fig(A), fb = fig(B);
  const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
  const row = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(6) : String(c).padStart(13))).join("");
  log("");
  log(row(["phase", "jobs/s", "p50 c→a ms", "p99 c→a ms", "p50 e→a ms", "p99 e→a ms", "not done", "server CPU", "rss MiB", "fds peak"]));
  for (const [label, x, ph] of [["A", fa, A], ["B", fb, B]]) {
    log(row([label, f(x.rate), f(x.p50, 2), f(x.p99, 2), f(x.e50, 2), f(x.e99, 2), x.refused, `${f(100 * x.cpu, 0)} %`, f(ph.rss, 0), ph.fds]));
  }
  log(row(["B/A", f(fb.rate / fa.rate, 3), f(fb.p50 / fa.p50, 2), f(fb.p99 / fa.p99, 2), f(fb.e50 / fa.e50, 2), f(fb.e99 / fa.e99, 2), "", "", "", ""]));
  log(`(c→a: the claim's response to the ack's response; e→a: the enqueue's request to the ack's response; quiet client: CPU A ${f(A.clientCpu / 10 / A.elapsed, 0)} %, B ${f(B.clientCpu / 10 / B.elapsed, 0)} %, event-loop lag p99 A ${f(A.loopP99, 1)} ms, B ${f(B.loopP99, 1)} ms; server fds with the flood under way ${fdsFlood}, at the end ${fdsEnd})`);
  log("");
  if (nr) {
    const parts = [["claim", `long-poll claims (${args.claims})`], ["sse", `SSE streams (${args.streams})`], ["embed", `embed (${args.embeds} × ${args.embedTexts} texts)`],
      ["metrics", `metrics (${args.metricNames} names)`], ["idle", `idle sockets (${args.idle})`]];
    log(`noisy tenant, what it got during B (its client: CPU ${f((100 * nr.cpuS) / nr.secs, 0)} % of a core, event loop ${f(100 * nr.elu, 0)} % busy):`);
    log(`  ${"".padEnd(30)}${["2xx", "429", "403", "other", "refused", "neterr"].map((h) => h.padStart(9)).join("")}`);
    for (const [key, name] of parts) {
      const s = nr.stats[key] ?? {};
      const other = Object.entries(s).filter(([k]) => !["2xx", "429", "403", "refused"].includes(k) && !k.startsWith("neterr"));
      const net = Object.entries(s).filter(([k]) => k.startsWith("neterr"));
      const sum = (es) => es.reduce((a, [, n]) => a + n, 0);
      log(`  ${name.padEnd(30)}${[s["2xx"] ?? 0, s["429"] ?? 0, s["403"] ?? 0, sum(other), s.refused ?? 0, sum(net)].map((n) => String(n).padStart(9)).join("")}` +
        (other.length || net.length ? `   (${[...other, ...net].map(([k, n]) => `${k}: ${n}`).join(", ")})` : ""));
    }
    const e = nr.extra;
    log(`  SSE: ${e.sseBytes} bytes read, ${e.sseClosed} streams closed by the server; idle sockets: ${e.idleConnected} connected, ${e.idleClosed} closed by the server; embed: ${e.embedTexts} texts embedded`);
  } else log("noisy tenant: no report from its process");
  const reasons = [];
  if (!(fb.p99 <= fa.p99 * 1.1 + args.slackMs)) reasons.push(`quiet p99 claim→ack ${f(fb.p99, 2)} ms in B vs ${f(fa.p99, 2)} ms in A (×${f(fb.p99 / fa.p99, 2)}, more than 10 %${args.slackMs ? ` + ${args.slackMs} ms` : ""})`);
  if (!(fb.rate >= fa.rate * 0.9)) reasons.push(`quiet jobs/s ${f(fb.rate)} in B vs ${f(fa.rate)} in A (×${f(fb.rate / fa.rate, 3)}, below 90 %)`);
  if (fb.refused > 0) reasons.push(`${fb.refused} quiet job(s) or request(s) of B refused or not done: ${JSON.stringify(B.refused)}${B.backlog ? `, ${B.backlog} not acked` : ""}`);
  log("");
  log(`noisy ${args.store}: A ${f(fa.rate)} jobs/s p50 ${f(fa.p50, 2)} p99 ${f(fa.p99, 2)} ms e2e-p99 ${f(fa.e99, 2)} ms | B ${f(fb.rate)} jobs/s p50 ${f(fb.p50, 2)} p99 ${f(fb.p99, 2)} ms e2e-p99 ${f(fb.e99, 2)} ms | B/A jobs/s ${f(fb.rate / fa.rate, 3)} p99 ${f(fb.p99 / fa.p99, 2)}`);
  if (reasons.length) log(`GOAL NOT MET: ${reasons.join("; ")}`);
  else log("GOAL MET");
  process.exit(reasons.length && args.strict ? 1 : 0);
}
