// The page stays smooth while its worker runs: during a 3 000-job run in queue mode, no long
// task (the Long Tasks API: main-thread work over 50 ms) and no click that waited over 50 ms for
// the main thread (Event Timing: from the input to its handler). The page does nothing but host
// the worker, so whatever lands on its main thread is ternflow's (client.js: the worker's
// messages, the lease mirror, the device watchers). Real `ternflow serve`, the npm package's
// worker in headless Chromium (the one engine here with both observers).
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, launchChromium, serveStatic, sleep } from "../../scripts/harness.mjs";
import { enqueueCorpus, serve, workerPage } from "./server.mjs";

const JOBS = 3000;

test("no long task and no slow click on the page during a 3 000-job run", { timeout: 600_000 }, async () => {
  const token = "smooth-" + Math.random().toString(36).slice(2);
  const server = await serve(token);
  const api = client(server.url, token);
  const stat = await serveStatic({ "/": workerPage(server.url, token) });
  const browser = await launchChromium();
  try {
    const tab = await browser.newPage();
    // Before any of the page's own scripts: every long task from the first one on.
    await tab.addInitScript(() => {
      window.__long = [];
      window.__clicks = [];
      new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); })
        .observe({ type: "longtask", buffered: true });
      new PerformanceObserver((l) => {
        for (const e of l.getEntries()) {
          if (e.name === "click" || e.name === "pointerdown") window.__clicks.push(e.processingStart - e.startTime);
        }
      }).observe({ type: "event", buffered: true, durationThreshold: 16 });
      addEventListener("click", () => {});
    });
    await tab.goto(stat.url + "/");
    await tab.waitForFunction(() => window.__ready || window.__error, null, { timeout: 120_000, polling: 100 });
    assert.equal(await tab.evaluate(() => window.__error ?? null), null);
    const startup = await tab.evaluate(() => [...window.__long]);
    const ids = enqueueCorpus(server, token, JOBS);
    const t0 = performance.now();
    let clicks = 0;
    for (;;) {
      await tab.mouse.click(10 + (clicks % 50), 10);
      clicks++;
      const q = (await api.get("/v1/dashboard?since=" + Date.now())).queue;
      if (q.ready + q.delayed + q.leased === 0) break;
      assert.ok(performance.now() - t0 < 300_000, `not drained: ${JSON.stringify(q)}`);
      await sleep(100);
    }
    const secs = (performance.now() - t0) / 1000;
    const st = await api.statuses(ids, { vectors: false });
    assert.equal(st.filter((s) => s.state === "done").length, JOBS, "every job done");
    await sleep(500); // the last entries reach the observers
    const { long, delays } = await tab.evaluate(() => ({ long: window.__long, delays: window.__clicks }));
    const during = long.slice(startup.length);
    const worst = (xs) => (xs.length ? Math.max(...xs).toFixed(0) : "0");
    console.log(`smooth: ${JOBS} jobs in ${secs.toFixed(1)} s; long tasks: ${during.length} during the run (longest ${worst(during)} ms), ` +
      `${startup.length} while the page started (longest ${worst(startup)} ms: the wasm and model load); ` +
      `${clicks} clicks, ${delays.length} of them took over 16 ms to their next paint, their longest wait for the main thread ${worst(delays)} ms`);
    assert.deepEqual(during.filter((d) => d > 50), [], "no long task over 50 ms during the run");
    assert.deepEqual(delays.filter((d) => d > 50), [], "no click waited over 50 ms");
    // The observers do see: 120 ms of the page's own work on the main thread is one long task,
    // and a click during it waits.
    const [before, beforeClicks] = await tab.evaluate(() => [window.__long.length, window.__clicks.length]);
    await tab.evaluate(() => setTimeout(() => { const t = performance.now(); while (performance.now() - t < 120); }, 0));
    await tab.mouse.click(20, 20);
    await sleep(500);
    const seen = await tab.evaluate(([n, m]) => [window.__long.slice(n), window.__clicks.slice(m)], [before, beforeClicks]);
    assert.ok(seen[0].some((d) => d >= 100), `the long-task observer saw the 120 ms task: ${JSON.stringify(seen)}`);
    await tab.evaluate(() => window.__worker.stop({ deadline: 3000 }));
  } finally {
    await browser.close();
    stat.close();
    server.stop();
  }
});
