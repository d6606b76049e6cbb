// The edge fixture: the user's Workers bundled by esbuild (workerd/build.mjs) and run in real
// workerd from npm. Two builds: the model bundled (Paid plan) and fetched at run time (Free plan).
import { spawn } from "node:child_process";
import { readFileSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { BIN, HERE, freePort, sh } from "./lib.mjs";

export const VARIANTS = [
  { name: "bundled model (ternflow/edge)", main: "worker.js", modules: ["ternflow_bg.wasm", "ternlight-int4.bin"] },
  { name: "model at run time (ternflow/edge/remote-model)", main: "worker-remote-model.js", modules: ["ternflow_bg.wasm"] },
];

/** Builds both Workers into `dir`. */
export async function buildEdge(dir) {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  await sh(process.execPath, [join(HERE, "workerd/build.mjs")], { env: { OUT_DIR: dir } });
  return { dir, variants: VARIANTS };
}

/** What each build uploads, gzipped (the Workers limits count the compressed upload). */
export function edgeUploads({ dir, variants }) {
  return variants.map((v) => ({
    name: v.name,
    gzipped: [v.main, ...v.modules].map((f) => gzipSync(readFileSync(join(dir, f)), { level: 9 }).length).reduce((a, b) => a + b, 0),
  }));
}

function capnp(port, variant, env, queuePort) {
  const bindings = Object.entries(env)
    .map(([k, v]) => `(name = ${JSON.stringify(k)}, text = ${JSON.stringify(v)})`)
    .join(", ");
  const kind = (f) => (f.endsWith(".wasm") ? "wasm" : "data");
  const modules = [
    `(name = "worker.js", esModule = embed ${JSON.stringify(variant.main)})`,
    ...variant.modules.map((f) => `(name = ${JSON.stringify(f)}, ${kind(f)} = embed ${JSON.stringify(f)})`),
  ].join(",\n    ");
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .w),
    # The test's servers are on loopback, which workerd's default outbound refuses.
    (name = "net", network = (allow = ["public", "private", "local"])),
    (name = "driver", worker = .d),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:${port}", http = (), service = "main"),
    ${queuePort ? `(name = "queue", address = "127.0.0.1:${queuePort}", http = (), service = "driver"),` : ""}
  ],
);
const d :Workerd.Worker = (
  modules = [(name = "driver.js", esModule = embed "driver.js")],
  compatibilityDate = "2025-09-01",
  compatibilityFlags = ["service_binding_extra_handlers"],
  bindings = [(name = "TARGET", service = "main")],
);
const w :Workerd.Worker = (
  modules = [
    ${modules}
  ],
  compatibilityDate = "2025-09-01",
  globalOutbound = "net",
  bindings = [${bindings}],
);
`;
}

/** Starts workerd on one build; resolves once it answered its first POST (cold start). */
export async function startWorkerd(dir, variant, env = {}, firstTexts = ["hello edge"]) {
  const port = await freePort();
  const queuePort = await freePort();
  const cfg = join(dir, `config-${port}.capnp`);
  writeFileSync(cfg, capnp(port, variant, env, queuePort));
  const t0 = performance.now();
  const proc = spawn(join(BIN, "workerd"), ["serve", "--experimental", cfg], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  proc.stdout.on("data", (d) => (log += d));
  proc.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  let first;
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(url, { method: "POST", body: JSON.stringify({ texts: firstTexts }) });
      first = { status: r.status, body: await r.json() };
      break;
    } catch (e) {
      if (proc.exitCode !== null || i > 400) throw new Error(`workerd did not start: ${e.message}\n${log}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  return {
    url,
    /** POST { messages: [{ id, body, attempts }] } here: a queue event for the Worker. */
    queueUrl: `http://127.0.0.1:${queuePort}`,
    pid: proc.pid,
    first,
    coldMs: performance.now() - t0,
    log: () => log,
    stop: () => new Promise((r) => { if (proc.exitCode !== null) return r(); proc.once("exit", r); proc.kill("SIGTERM"); }),
  };
}

/** CPU time (user + system) the process has used, ms (Linux /proc). */
export function workerdCpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

/** POSTs texts; resolves to { status, body, ms }. */
export async function post(url, texts) {
  const t0 = performance.now();
  const r = await fetch(url, { method: "POST", body: JSON.stringify({ texts }) });
  return { status: r.status, body: await r.json(), ms: performance.now() - t0 };
}
