// The CPU budget as the visitor's device sees it: one worker of the npm package in headless
// Chromium (or Firefox ESR, or WebKitGTK under Xvfb: --engine, tests/e2e/engines.mjs) on a real
// `ternflow serve` with a full queue, run for --seconds (60) under each --budget (default
// `1,0.25`), and the CPU the whole browser process tree took meanwhile (/proc, every thread: the
// worker, its engine worker, IndexedDB, the network), in cores; beside it the engine's busy
// share as the worker's budget measured it, and the jobs done.
// Usage (after scripts/build-pkg.sh and a `ternflow` build): node bench/budget.mjs
//   [--bin target/release/ternflow] [--seconds 60] [--budget 1,0.25] [--engine chromium|firefox|webkit]
import { children, diff, snapshot } from "./cpu.mjs";
import { serveStatic, sleep } from "../scripts/harness.mjs";
import { openBrowser } from "../tests/e2e/engines.mjs";
import { enqueueCorpus, serve, workerPage } from "../tests/e2e/server.mjs";

const args = { seconds: 60, budgets: [1, 0.25], engine: "chromium" };
for (let i = 2; i < process.argv.length; i += 2) {
  const [k, v] = [process.argv[i], process.argv[i + 1]];
  if (k === "--seconds") args.seconds = Number(v);
  else if (k === "--budget") args.budgets = v.split(",").map(Number);
  else if (k === "--bin") process.env.TERNFLOW_BIN = v;
  else if (k === "--engine") args.engine = v;
  else throw new Error(`unknown argument ${k}`);
}

const total = (m) => [...m.values()].reduce((s, v) => s + v, 0);

for (const budget of args.budgets) {
  const token = "bench-" + Math.random().toString(36).slice(2);
  const server = await serve(token);
  const stat = await serveStatic({ "/": workerPage(server.url, token, budget < 1 ? { budget } : {}) });
  const browser = await openBrowser(args.engine);
  try {
    // More jobs than a budget-free worker finishes in the run: the queue never empties.
    enqueueCorpus(server, token, 25_000);
    const tab = await browser.newTab(stat.url + "/");
    await tab.waitFor(() => window.__ready || window.__error);
    const err = await tab.evaluate(() => window.__error ?? null);
    if (err) throw new Error(err);
    // The browser's process tree: Chromium is this process's child; Firefox and MiniBrowser
    // are their WebDriver's (whose own share is a few requests).
    const prefix = { chromium: "chrom", firefox: "geckodriver", webkit: "WebKitWebDriv" }[args.engine];
    const roots = Object.fromEntries(children(process.pid, prefix).map((p, i) => [`${args.engine}${i}`, p]));
    const stats = () => tab.evaluate(() => window.__worker.stats());
    await sleep(3000); // past the model load and the first claim
    const [s0, c0, t0] = [await stats(), snapshot(roots), performance.now()];
    await sleep(args.seconds * 1000);
    const [s1, c1, t1] = [await stats(), snapshot(roots), performance.now()];
    const wall = t1 - t0;
    const cores = total(diff(c0, c1)) / wall;
    const busy = (s1.gauges.engine_busy_ms - s0.gauges.engine_busy_ms) / wall;
    const jobs = (s1.counters.jobs_done ?? 0) - (s0.counters.jobs_done ?? 0);
    const left = (await (await fetch(server.url + "/v1/stats", { headers: { authorization: "Bearer " + token } })).json()).queue;
    console.log(`${args.engine} budget ${budget}: browser CPU ${cores.toFixed(3)} cores over ${(wall / 1000).toFixed(1)} s; ` +
      `engine busy ${(100 * busy).toFixed(1)} % (the budget's measure); ${jobs} jobs = ${(jobs / (wall / 1000)).toFixed(1)} jobs/s; ` +
      `queue at the end ${JSON.stringify(left)}`);
  } finally {
    await browser.close();
    stat.close();
    server.stop();
  }
}
