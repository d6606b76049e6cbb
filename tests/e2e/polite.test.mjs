// A good guest on the visitor's device: a hidden tab claims nothing (jobs in hand finish) and
// claims again when shown; `start({ budget })` keeps the engine to its share of the time. Real
// `ternflow serve`, the npm package's worker in headless Chromium.
//
// Headless Chromium keeps every tab visible (a minimised window or another tab in front leaves
// `visibilityState` "visible"; checked through CDP), so the page's visibility is emulated: the
// document says "hidden" and the browser's `visibilitychange` event is dispatched, as a tab
// switch would. What is tested is the package's answer to that event.
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, launchChromium, serveStatic, sleep } from "../../scripts/harness.mjs";
import { enqueueCorpus, serve, workerPage } from "./server.mjs";

/** Opens `page` in a new tab of `browser` and waits for its worker. */
async function open(browser, url) {
  const tab = await browser.newPage();
  tab.on("console", (m) => { if (m.type() === "error") console.error(`[tab] ${m.text()}`); });
  await tab.goto(url);
  await tab.waitForFunction(() => window.__ready || window.__error, null, { timeout: 120_000, polling: 100 });
  assert.equal(await tab.evaluate(() => window.__error ?? null), null);
  return tab;
}

const setHidden = (tab, hidden) => tab.evaluate((h) => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => (h ? "hidden" : "visible") });
  Object.defineProperty(document, "hidden", { configurable: true, get: () => h });
  document.dispatchEvent(new Event("visibilitychange"));
}, hidden);

test("a hidden tab claims nothing after 1 s and claims again when shown", { timeout: 300_000 }, async () => {
  const token = "polite-" + Math.random().toString(36).slice(2);
  const server = await serve(token);
  const api = client(server.url, token);
  const stat = await serveStatic({ "/": workerPage(server.url, token) });
  const browser = await launchChromium();
  try {
    enqueueCorpus(server, token, 3000);
    const counters = async () => (await api.get("/v1/dashboard?since=" + Date.now())).counters;
    const tab = await open(browser, stat.url + "/");
    for (const t0 = Date.now(); ((await counters()).jobs_acked ?? 0) < 200; await sleep(50)) {
      assert.ok(Date.now() - t0 < 120_000, "the worker never got going");
    }
    await setHidden(tab, true);
    assert.deepEqual(await tab.evaluate(() => window.__worker.pausedFor), ["hidden"]);
    await sleep(1000);
    const c1 = (await counters()).jobs_claimed;
    await sleep(3000);
    const c2 = (await counters()).jobs_claimed;
    const paused = (await tab.evaluate(() => window.__worker.stats())).gauges.paused;
    console.log(`polite: hidden: ${c2 - c1} claims from 1 s to 4 s after the tab was hidden (worker gauge paused = ${paused})`);
    assert.equal(c2 - c1, 0, "no claim while hidden");
    assert.equal(paused, 1);
    await setHidden(tab, false);
    const shown = Date.now();
    for (;;) {
      if ((await counters()).jobs_claimed > c2) break;
      assert.ok(Date.now() - shown < 10_000, "no claim within 10 s of the tab shown again");
      await sleep(20);
    }
    console.log(`polite: shown again: the next claim after ${Date.now() - shown} ms`);
    // `pause()` is a reason of its own: showing the tab does not lift it.
    await tab.evaluate(() => window.__worker.pause());
    assert.deepEqual(await tab.evaluate(() => window.__worker.pausedFor), ["paused"]);
    await tab.evaluate(() => window.__worker.resume());
    assert.deepEqual(await tab.evaluate(() => window.__worker.pausedFor), []);
    await tab.evaluate(() => window.__worker.stop({ deadline: 3000 }));
  } finally {
    await browser.close();
    stat.close();
    server.stop();
  }
});

test("with budget 0.25 the engine is busy about a quarter of the time", { timeout: 300_000 }, async () => {
  const token = "budget-" + Math.random().toString(36).slice(2);
  const server = await serve(token);
  const stat = await serveStatic({ "/": workerPage(server.url, token, { budget: 0.25 }) });
  const browser = await launchChromium();
  try {
    enqueueCorpus(server, token, 3000);
    const tab = await open(browser, stat.url + "/");
    const gauges = async () => (await tab.evaluate(() => window.__worker.stats())).gauges;
    await sleep(2000);
    const [g0, t0] = [await gauges(), performance.now()];
    await sleep(10_000);
    const [g1, t1] = [await gauges(), performance.now()];
    const share = (g1.engine_busy_ms - g0.engine_busy_ms) / (t1 - t0);
    console.log(`polite: budget 0.25: the engine busy ${(100 * share).toFixed(1)} % of 10 s (its own measure; bench/budget.mjs measures the processes' CPU)`);
    assert.equal(g1.cpu_share, 0.25);
    // A quarter, plus at most the 250 ms of credit saved before the window and the edges of
    // the two reads: a broken budget is busy ~100 %.
    assert.ok(share > 0.1 && share <= 0.35, `busy ${share.toFixed(3)} of the time`);
    await assert.rejects(
      tab.evaluate(() => window.__worker.start({ budget: 2 })),
      /budget must be a share of one core/,
    );
    await tab.evaluate(() => window.__worker.stop({ deadline: 3000 }));
  } finally {
    await browser.close();
    stat.close();
    server.stop();
  }
});
