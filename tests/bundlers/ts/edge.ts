// The edge entries have types too.
import worker, { type EdgeEnv, type QueueBatch } from "ternflow/edge";
import free from "ternflow/edge/remote-model";
import { createHandler, createWorker } from "ternflow/edge/handler";

const env: EdgeEnv = { TERNFLOW_SERVER: "http://127.0.0.1:8787", TERNFLOW_MODEL_URL: "https://x/m.bin" };
const res: Promise<Response> = worker.fetch(new Request("http://x/", { method: "POST" }), env);
export async function consume(batch: QueueBatch): Promise<number> {
  const s = await free.queue(batch, env);
  return s.acked + s.retried + s.reported.length;
}
// @ts-expect-error the env has no such binding
const wrong: EdgeEnv = { TERNFLOW_SERVR: "x" };
void wrong;
void res;
void createHandler;
void createWorker;
