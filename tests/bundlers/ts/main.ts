// A strict TypeScript consumer of the browser entry (no skipLibCheck): the declarations must
// compile, and misuse must not.
import { EmbeddingWorker, TernflowError, similar, type TernflowErrorCode, type Progress } from "ternflow";
import type { TernflowEngine } from "ternflow/wasm";

const w = new EmbeddingWorker({
  config: { maxTextBytes: 4096, requestTimeoutMs: 5000, lockWait: { baseMs: 10 } },
  onProgress: (p: Progress) => console.log(p.phase, p.loaded, p.total),
});
// @ts-expect-error unknown config keys are refused
new EmbeddingWorker({ config: { maxTextByte: 4096 } });
// @ts-expect-error unknown options are refused
new EmbeddingWorker({ modle: false });

async function main(): Promise<number> {
  const ac = new AbortController();
  const v: Float32Array = await w.embed("hi", { signal: ac.signal });
  const hits = await similar("q", ["a", "b"], { worker: w, topK: 1 });
  const best: number = hits[0]?.sim ?? 0;
  const alias: number = hits[0]?.score ?? 0;
  await w.embedMany(["a", "b"], { onProgress: (p) => p.loaded });
  const settled = await w.embedMany(["a", "b"], { settle: true });
  for (const r of settled) {
    if (r.status === "fulfilled") r.value.length;
    else r.reason.code;
  }
  try {
    await w.ready;
  } catch (e) {
    if (e instanceof TernflowError) {
      const code: TernflowErrorCode = e.code;
      if (code === "http_404" || code === "bad_model" || code === "aborted") return 0;
      const url: string | undefined = e.url;
      return url?.length ?? 1;
    }
  }
  // @ts-expect-error not a code
  const wrong: TernflowErrorCode = "no_such_code";
  void wrong;
  return v.length + best + alias;
}

export type Engine = TernflowEngine;
void main;
