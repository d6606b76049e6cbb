// Many tenants on one server (the tenants figure): one `ternflow serve` (a fresh embedded store in
// a temporary --data-dir, or a Redis URL with a fresh --redis-prefix), signed HS256 tokens, and N
// tenants (default 10 000) driven with a bounded concurrency. Each tenant, with a producer token
// and a worker token of its own `sub`: enqueues one job, claims it, acks it with the true vector of
// its text (one text for every job: its vector is fetched once with POST /v1/embed before the
// clock starts, so the server's verification of every new identity passes) and reads its status
// back, which must be `done`. Every request that is refused is counted by step, status and error
// code; network errors (after 4 retries) apart. The server's RSS (VmRSS) and open descriptors
// (/proc/<pid>/fd) are sampled every second. Meant to run under `ulimit -n 1024`
// (bench/tenants.sh): the server must serve far more tenants than it may hold files open.
// Prints one summary line:
//   tenants 10000 done 10000 5xx 0 4xx 0 neterr 0 other 0 wall 83.1 s 120.3 tenants/s
//     rss_peak 212 MiB fds_peak 640 fds_end 120
// and exits non-zero when a tenant was not done or any answer was a 5xx.
// Usage: node bench/tenants.mjs [--bin BIN] [--model FILE] [--tenants N] [--concurrency C]
//          [--store embedded|redis://HOST:PORT/DB] [--settle S] [--serve-arg X]... [--keep]
//   --bin          the server binary (default target/release/ternflow)
//   --model        the model (default models/ternlight-int4.bin)
//   --tenants N    tenants (default 10000)
//   --concurrency  tenants in flight at once (default 32)
//   --store        `embedded` (default) or a Redis URL; on Redis a fresh prefix per run, its keys
//                  deleted at the end (with redis-cli, when installed) unless --keep
//   --settle S     after the last tenant, wait S seconds and sample the descriptors again
//                  (fds_settled: what idle tenants still hold; default 0, not sampled)
//   --serve-arg X  one more argument to `ternflow serve` (repeatable), e.g.
//                  --serve-arg --max-open-tenants --serve-arg 128
//   --keep         keep the data directory (embedded) or the Redis keys
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort, minter, root, sleep } from "../scripts/harness.mjs";

const args = {
  bin: join(root, "target/release/ternflow"), model: join(root, "models/ternlight-int4.bin"),
  tenants: 10000, concurrency: 32, store: "embedded", settle: 0, serveArgs: [], keep: false,
};
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i];
  if (k === "--keep") { args.keep = true; continue; }
  if (i + 1 >= process.argv.length) throw new Error(`${k} needs a value`);
  const v = process.argv[++i];
  if (k === "--bin") args.bin = resolve(v);
  else if (k === "--model") args.model = resolve(v);
  else if (k === "--tenants") args.tenants = Number(v);
  else if (k === "--concurrency") args.concurrency = Number(v);
  else if (k === "--store") args.store = v;
  else if (k === "--settle") args.settle = Number(v);
  else if (k === "--serve-arg") args.serveArgs.push(v);
  else throw new Error(`unknown argument ${k}`);
}
if (!(args.tenants >= 1) || !(args.concurrency >= 1)) throw new Error("--tenants and --concurrency must be at least 1");
if (args.store !== "embedded" && !/^rediss?:\/\//.test(args.store)) throw new Error("--store is `embedded` or a redis:// URL");

const log = (...a) => console.log(...a);
const tmp = mkdtempSync(join(tmpdir(), "ternflow-tenants-"));
const runId = randomBytes(4).toString("hex");
const redisPrefix = `tfbench-tenants-${runId}`;

// ---- signed tokens: a tenant and a `sub` each ---------------------------------------------------
const secret = randomBytes(32);
const mint = minter(secret);

// ---- the server ---------------------------------------------------------------------------------
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
server.on("exit", (code, sig) => { serverGone = `${code ?? sig}`; if (!stopping) console.error(`server exited (${code ?? sig}) during the run`); });
const base = `http://127.0.0.1:${port}`;
for (let i = 0; ; i++) {
  try { if ((await fetch(base + "/healthz")).ok) break; } catch {}
  if (serverGone !== null || i > 400) { console.error("server did not start:\n" + serverErr); process.exit(1); }
  await sleep(50);
}

// ---- the server's memory and descriptors, every second ------------------------------------------
const rssMiB = () => {
  try { return Number(readFileSync(`/proc/${server.pid}/status`, "utf8").match(/^VmRSS:\s+(\d+) kB/m)[1]) / 1024; } catch { return NaN; }
};
const fds = () => { try { return readdirSync(`/proc/${server.pid}/fd`).length; } catch { return NaN; } };
let rssPeak = 0, fdsPeak = 0;
const sample = () => {
  const r = rssMiB(), f = fds();
  if (r > rssPeak) rssPeak = r;
  if (f > fdsPeak) fdsPeak = f;
  return { r, f };
};
sample();
const sampler = setInterval(sample, 1000);

// ---- requests: JSON in and out, again on a network error ----------------------------------------
// The server closes kept-alive connections idle past its header timeout, and a pooled one may be
// reused just as it does: a request is sent again on a network error (4 times, 100 ms apart).
class NetError extends Error {}
async function call(method, path, token, body) {
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
      if (i >= 4 || serverGone !== null) throw new NetError(`${e.cause?.code ?? e.name}: ${e.cause?.message ?? e.message}`);
      await sleep(100);
    }
  }
}

// ---- the job's text and its true vector ---------------------------------------------------------
const TEXT = "How do I reset my password if I no longer have access to my email?";
const tenantName = (i) => `t${String(i).padStart(5, "0")}`;
let vector, modelId;
{
  // The first tenant's worker token asks for it (that tenant is opened before the clock starts).
  const r = await call("POST", "/v1/embed", mint("worker", tenantName(0), `${tenantName(0)}-worker`), { texts: [TEXT] });
  if (r.status !== 200) { console.error(`POST /v1/embed: ${r.status} ${JSON.stringify(r.json)}`); stopping = true; server.kill("SIGTERM"); process.exit(1); }
  vector = r.json.vectors[0];
  modelId = r.json.model_id;
}

// ---- one tenant ---------------------------------------------------------------------------------
const counts = { done: 0, c4xx: 0, c5xx: 0, neterr: 0, other: 0 };
const reasons = new Map(); // "step status code" → count
const note = (kind, what) => { counts[kind]++; const k = `${kind.replace(/^c/, "")} ${what}`; reasons.set(k, (reasons.get(k) ?? 0) + 1); };
// A refusal of a step: counted by step, status and code; false ends the tenant.
const ok = (step, r, want = 200) => {
  if (r.status === want) return true;
  note(r.status >= 500 ? "c5xx" : r.status >= 400 ? "c4xx" : "other", `${step} ${r.status} ${r.code ?? ""}`.trim());
  return false;
};

async function runTenant(i) {
  const tenant = tenantName(i);
  const producer = mint("producer", tenant, `${tenant}-producer`);
  const workerSub = `${tenant}-worker`;
  const worker = mint("worker", tenant, workerSub);
  const id = `job-${tenant}`;
  let step = "enqueue";
  try {
    const e = await call("POST", "/v1/jobs", producer, { id, text: TEXT });
    if (!ok(step, e)) return;
    step = "claim";
    let job = null;
    for (let k = 0; k < 5 && !job; k++) {
      const c = await call("POST", "/v1/jobs/claim", worker, { worker: workerSub, max: 1, wait_ms: 200 });
      if (!ok(step, c)) return;
      job = c.json.jobs.find((j) => j.id === id) ?? null;
    }
    if (!job) { note("other", "claim: no job within 5 claims"); return; }
    step = "ack";
    const a = await call("POST", "/v1/jobs/ack", worker, {
      worker: workerSub,
      acks: [{ id, token: job.lease.token, result: { model_id: job.model_id || modelId, vector, source: "engine" } }],
    });
    if (!ok(step, a)) return;
    const outcome = a.json.results?.[0];
    if (outcome?.outcome !== "done") { note("other", `ack outcome ${outcome?.outcome ?? "?"} ${outcome?.error?.code ?? ""}`.trim()); return; }
    step = "status";
    const s = await call("GET", `/v1/jobs/${id}`, producer);
    if (!ok(step, s)) return;
    if (s.json.state !== "done") { note("other", `status ${s.json.state}`); return; }
    counts.done++;
  } catch (e) {
    if (e instanceof NetError) note("neterr", `${step} ${e.message.split(":")[0]}`);
    else throw e;
  }
}

// ---- the run ------------------------------------------------------------------------------------
log(`# ${new Date().toISOString()} ${process.env.HOSTNAME ?? ""} load ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}; ulimit -n ${spawnSync("sh", ["-c", "ulimit -n"]).stdout.toString().trim()}`);
log(`# ${args.bin} ${serveArgv.join(" ")}`);
log(`# ${args.tenants} tenants, concurrency ${args.concurrency}, store ${args.store}${args.store === "embedded" ? "" : ` (prefix ${redisPrefix})`}`);
const t0 = performance.now();
let next = 0, finished = 0;
const progress = setInterval(() => {
  const s = (performance.now() - t0) / 1000;
  const { r, f } = sample();
  log(`${s.toFixed(0).padStart(5)} s: ${finished}/${args.tenants} tenants (${counts.done} done, ${counts.c4xx} 4xx, ${counts.c5xx} 5xx, ${counts.neterr} neterr, ${counts.other} other), ${(finished / s).toFixed(1)} tenants/s; rss ${r.toFixed(0)} MiB, fds ${f}`);
}, 10000);
await Promise.all(Array.from({ length: Math.min(args.concurrency, args.tenants) }, async () => {
  while (next < args.tenants && serverGone === null) {
    const i = next++;
    await runTenant(i);
    finished++;
  }
}));
const wall = (performance.now() - t0) / 1000;
clearInterval(progress);
const end = sample();
let settled = null;
if (args.settle > 0 && serverGone === null) {
  await sleep(args.settle * 1000);
  settled = sample();
}
clearInterval(sampler);
const notRun = args.tenants - finished;
const died = serverGone; // the server's exit during the run, if it exited

// ---- the report ---------------------------------------------------------------------------------
stopping = true;
if (serverGone === null) server.kill("SIGTERM");
const exited = serverGone !== null ? Promise.resolve() : new Promise((r) => server.on("exit", r));
await Promise.race([exited, sleep(15000)]);
if (!args.keep) {
  rmSync(tmp, { recursive: true, force: true });
  if (args.store !== "embedded") {
    // The run's keys: everything under its prefix (redis-cli, when installed).
    const del = spawnSync("sh", ["-c", `redis-cli -u "$1" --scan --pattern "$2*" | xargs -r -n 500 redis-cli -u "$1" unlink >/dev/null`, "sh", args.store, redisPrefix]);
    if (del.status !== 0) log(`# could not delete the Redis keys under ${redisPrefix}: ${del.stderr}`);
  }
} else log(`# kept ${args.store === "embedded" ? join(tmp, "data") : `Redis keys under ${redisPrefix}`}`);
if (reasons.size) {
  log("not done, by step, status and code:");
  for (const [k, n] of [...reasons].sort((a, b) => b[1] - a[1])) log(`  ${String(n).padStart(6)}  ${k}`);
}
if (notRun) log(`${notRun} tenants not run (the server exited: ${died})`);
if (counts.done !== args.tenants || died !== null) {
  const tail = serverErr.replace(/\x1b\[[0-9;]*m/g, "").trim().split("\n").slice(-8).join("\n  ");
  if (tail) log(`server log, last lines:\n  ${tail}`);
}
log(`tenants ${args.tenants} done ${counts.done} 5xx ${counts.c5xx} 4xx ${counts.c4xx} neterr ${counts.neterr} other ${counts.other + notRun}` +
  ` wall ${wall.toFixed(1)} s ${(finished / wall).toFixed(1)} tenants/s rss_peak ${rssPeak.toFixed(0)} MiB fds_peak ${fdsPeak} fds_end ${end.f}` +
  (settled ? ` fds_settled ${settled.f} (after ${args.settle} s)` : "") + (died !== null ? ` server_exited ${died}` : ""));
process.exit(counts.done === args.tenants && counts.c5xx === 0 && died === null ? 0 : 1);
