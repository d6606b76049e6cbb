// bench/floor.mjs's worker: the browser operations the queue pipeline makes for each batch of jobs
// at 0 % hits, from plain JS and without an engine — a claim request, the texts to a nested worker
// and vectors back, one IndexedDB transaction of one put per vector, the keys announced on a
// BroadcastChannel, an ack request carrying every vector — so that what Chromium spends on them can
// be told from what our code adds. Loaded twice: as the pipeline's worker and (?engine) as its
// nested "engine", which answers each batch with vectors at once instead of computing them.
const DIM = 384;
if (new URL(self.location.href).searchParams.has("engine")) {
  self.onmessage = (e) => {
    const { id, texts } = e.data;
    const out = new Float32Array(texts.length * DIM);
    for (let i = 0; i < out.length; i++) out[i] = ((i * 2654435761) % 1000) / 1000 - 0.5;
    self.postMessage({ id, vectors: out }, [out.buffer]);
  };
} else {
  const b64 = (bytes) => {
    if (bytes.toBase64) return bytes.toBase64();
    let s = "";
    for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return btoa(s);
  };
  const open = (name) => new Promise((res, rej) => {
    const r = indexedDB.open(name, 1);
    r.onupgradeneeded = () => r.result.createObjectStore("entries", { keyPath: "key" });
    r.onsuccess = () => res(r.result);
    r.onerror = () => rej(r.error);
  });
  self.onmessage = async (e) => {
    const { jobs, batch, api, phase, without } = e.data;
    const skip = new Set(without);
    try {
      const db = await open("floor-" + phase + "-" + Date.now());
      const engine = new Worker(self.location.pathname + "?engine");
      const waiting = new Map();
      engine.onmessage = (m) => { waiting.get(m.data.id)(m.data.vectors); waiting.delete(m.data.id); };
      let seq = 0;
      const embed = (texts) => new Promise((res) => { const id = ++seq; waiting.set(id, res); engine.postMessage({ id, texts }); });
      const announce = new BroadcastChannel("floor-keys-" + phase);
      await fetch("/__cpu?mark=" + phase + "-start");
      const t0 = performance.now();
      for (let done = 0; done < jobs; done += batch) {
        const claim = await (await fetch(api + "/claim", {
          method: "POST", headers: { "content-type": "application/json", authorization: "Bearer floor" },
          body: JSON.stringify({ worker: "floor", max: Math.min(batch, jobs - done), wait_ms: 0 }),
        })).json();
        const texts = claim.jobs.map((j) => j.text);
        const flat = skip.has("engine") ? new Float32Array(texts.length * DIM) : await embed(texts);
        const now = Date.now();
        const records = claim.jobs.map((j, i) => ({
          key: "m:" + j.id, vector: flat.subarray(i * DIM, (i + 1) * DIM), expires_at: now + 86400000, used_at: now,
        }));
        if (!skip.has("idb")) await new Promise((res, rej) => {
          const tx = db.transaction("entries", "readwrite");
          const store = tx.objectStore("entries");
          for (const r of records) store.put(r);
          tx.oncomplete = res;
          tx.onerror = () => rej(tx.error);
        });
        if (!skip.has("announce")) announce.postMessage(records.map((r) => r.key));
        const acks = claim.jobs.map((j, i) => ({
          id: j.id, token: j.lease.token, worker: "floor",
          result: { model_id: "m", vector: b64(new Uint8Array(flat.buffer, i * DIM * 4, DIM * 4)), source: "engine" },
          cache: { key: "m:" + j.id, fence: j.lease.fence },
        }));
        const answer = await (await fetch(api + "/ack", {
          method: "POST", headers: { "content-type": "application/json", authorization: "Bearer floor" },
          body: JSON.stringify({ acks }),
        })).json();
        if (answer.results.length !== acks.length) throw new Error("ack answer: " + answer.results.length);
      }
      const ms = performance.now() - t0;
      await fetch("/__cpu?mark=" + phase + "-end");
      engine.terminate();
      announce.close();
      db.close();
      self.postMessage({ ms });
    } catch (err) {
      self.postMessage({ error: String(err && err.stack || err) });
    }
  };
}
