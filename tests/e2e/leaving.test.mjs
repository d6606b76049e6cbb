// A visitor who leaves strands nothing: a tab closed while its worker holds leases hands them
// back in one request that outlives the page (`pagehide`, `fetch` with `keepalive`), so the jobs
// are claimable again at once instead of after their lease; another visitor's worker then
// finishes every job, none lost and none done twice. Real `ternflow serve` (embedded store,
// 30 s leases: the default), the npm package's worker (pkg/) in headless Chromium, Firefox ESR
// or WebKitGTK (`TERNFLOW_E2E_ENGINE`, tests/e2e/engines.mjs).
//
// Run (after scripts/build-pkg.sh and a `ternflow` build): TERNFLOW_BIN=target/debug/ternflow
//   [TERNFLOW_E2E_ENGINE=firefox|webkit] [xvfb-run -a] node --test tests/e2e/leaving.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, serveStatic, sleep } from "../../scripts/harness.mjs";
import { engineFromEnv, openBrowser } from "./engines.mjs";
import { enqueueCorpus, serve, workerPage } from "./server.mjs";

const JOBS = 1000;
const ENGINE = engineFromEnv();

test(`${ENGINE}: a tab closed mid-run hands its leases back at once; another worker finishes every job once`, { timeout: 600_000 }, async () => {
  const token = "leaving-" + Math.random().toString(36).slice(2);
  const server = await serve(token);
  const api = client(server.url, token);
  const stat = await serveStatic({ "/": workerPage(server.url, token) });
  const browser = await openBrowser(ENGINE);
  try {
    const ids = enqueueCorpus(server, token, JOBS);
    assert.equal(ids.length, JOBS);
    const queue = async () => (await api.get("/v1/dashboard?since=" + Date.now())).queue;
    const counters = async () => (await api.get("/v1/dashboard?since=" + Date.now())).counters;

    // Visitor 1: works until it has finished some jobs and holds 100 leases or more, then
    // closes the tab.
    const tab = await browser.newTab(stat.url + "/");
    await tab.waitFor(() => window.__ready || window.__error);
    assert.equal(await tab.evaluate(() => window.__error ?? null), null);
    let q;
    for (const t0 = Date.now(); ; await sleep(20)) {
      q = await queue();
      if (q.leased >= 100 && ((await counters()).jobs_acked ?? 0) >= 300) break;
      assert.ok(Date.now() - t0 < 120_000, `the worker never held 100 leases after 300 jobs: ${JSON.stringify(q)}`);
    }
    // No pause before the close: the worker tells the page of a claim up to 50 ms after it
    // landed, and it claims again as jobs finish, so some leases are ones the page has not
    // heard of, or still on their way. Those the session's end hands back.
    const c0 = await counters();
    const atClose = (await queue()).leased;
    const closed = performance.now();
    await tab.close();
    let freedMs = null;
    for (;;) {
      q = await queue();
      if (q.leased === 0) { freedMs = performance.now() - closed; break; }
      if (performance.now() - closed > 10_000) break;
      await sleep(10);
    }
    const c1 = await counters();
    const released = (c1.leases_released ?? 0) - (c0.leases_released ?? 0);
    // Leases whose acks (or nacks: a worker starved of CPU may time out) were on their way at
    // the close end done or retried, not handed back.
    const acked = (c1.jobs_acked ?? 0) - (c0.jobs_acked ?? 0);
    const nacked = (c1.jobs_nacked ?? 0) - (c0.jobs_nacked ?? 0);
    const answers = `the server's answers to the hand-back:\n${server.releases.slice(-12).join("\n")}`;
    await sleep(300); // the server logs how it learnt just after it handed the leases back
    // How the server learnt the worker was gone: the page's hand-back (it names the session:
    // the server adds what the page had not heard of), or, when the browser lost that request,
    // the worker's event stream dropping for good (crates/server/src/sessions.rs).
    const byPage = server.releases.find((l) => l.includes("a worker session ended"));
    const byStream = server.releases.find((l) => l.includes("a worker session's stream dropped"));
    const how = [byPage && `the page's hand-back (${byPage.match(/handed_back=(\d+)/)?.[1]} beyond its list)`,
      byStream && `the dropped stream (${byStream.match(/handed_back=(\d+)/)?.[1]})`].filter(Boolean).join(" and ") || "neither";
    console.log(`leaving (${ENGINE}): ${atClose} leases held at close; all claimable again after ${freedMs == null ? "> 10 s" : freedMs.toFixed(0) + " ms"} ` +
      `(${released} handed back, by ${how}; ${acked} acked and ${nacked} nacked meanwhile; lease 30 s)`);
    assert.ok(freedMs != null, `${q.leased} jobs still leased 10 s after the tab closed; ${answers}`);
    assert.ok(freedMs < 1000, `claimable again after ${freedMs} ms, not within 1 s; ${answers}`);
    assert.ok(released > 0, `nothing handed back of the ${atClose} held; ${answers}`);

    // Visitor 2 finishes the queue: every job done, each finished exactly once — by an ack, or
    // by the server at claim from the remote cache (visitor 1 wrote the entry, then its ack
    // was cut off by the close).
    const acked0 = c1.jobs_acked ?? 0;
    const tab2 = await browser.newTab(stat.url + "/");
    await tab2.waitFor(() => window.__ready || window.__error);
    for (const t0 = Date.now(); ; await sleep(100)) {
      q = await queue();
      if (q.ready + q.delayed + q.leased === 0) break;
      assert.ok(Date.now() - t0 < 300_000, `not drained: ${JSON.stringify(q)}`);
    }
    const st = await api.statuses(ids, { vectors: false });
    const notDone = st.filter((s) => s.state !== "done");
    assert.deepEqual(notDone.map((s) => `${s.id}: ${s.state}`), [], "every job done");
    // The counters may trail the last acks by a moment: read them until they settle.
    let c2 = await counters();
    for (const t0 = Date.now(); c2.jobs_acked + (c2.jobs_resolved_at_claim ?? 0) < JOBS && Date.now() - t0 < 5_000; await sleep(100)) {
      c2 = await counters();
    }
    const doneBefore = (c1.jobs_acked ?? 0) + (c1.jobs_resolved_at_claim ?? 0);
    const finished = c2.jobs_acked + (c2.jobs_resolved_at_claim ?? 0);
    console.log(`leaving (${ENGINE}): after the close, ${finished - doneBefore} finished for the ${JOBS - doneBefore} jobs left ` +
      `(${c2.jobs_acked - acked0} acks, ${(c2.jobs_resolved_at_claim ?? 0) - (c1.jobs_resolved_at_claim ?? 0)} from the remote cache at claim); ${finished} for ${JOBS} jobs in all`);
    assert.equal(finished, JOBS, "each job finished exactly once");
    await tab2.evaluate(() => window.__worker.stop({ deadline: 3000 }));
  } finally {
    await browser.close();
    stat.close();
    server.stop();
  }
});
