// BullMQ baseline for `ternflow bench-server`: N no-op jobs, addBulk in batches of 1000, then one
// Worker (concurrency C) with an empty processor, on the same Redis. Prints jobs/s.
//
//   npm install --prefix /tmp/bullbench bullmq@6 ioredis@5
//   NODE_PATH=/tmp/bullbench/node_modules node crates/server/bench/bullmq.mjs 16399 20000 8
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const { Queue, Worker } = require("bullmq");

const [port = "6379", n = "20000", conc = "8"] = process.argv.slice(2);
const N = Number(n);
const connection = { host: "127.0.0.1", port: Number(port) };
const name = `bench${process.pid}`;
const queue = new Queue(name, { connection });

let t = performance.now();
for (let i = 0; i < N; i += 1000) {
  const jobs = [];
  for (let j = i; j < Math.min(N, i + 1000); j++) jobs.push({ name: "e", data: { text: `job ${j}` } });
  await queue.addBulk(jobs);
}
const enq = (performance.now() - t) / 1000;
console.log(`bullmq ${require("bullmq/package.json").version}: enqueue (addBulk 1000): ${(N / enq).toFixed(0)} jobs/s`);

let done = 0;
t = performance.now();
await new Promise((resolve) => {
  const worker = new Worker(name, async () => {}, { connection, concurrency: Number(conc) });
  worker.on("completed", () => {
    if (++done === N) {
      const s = (performance.now() - t) / 1000;
      console.log(`bullmq: process (concurrency ${conc}, no-op): ${(N / s).toFixed(0)} jobs/s`);
      console.log(`bullmq: enqueue → process overall: ${(N / (s + enq)).toFixed(0)} jobs/s`);
      worker.close().then(resolve);
    }
  });
});
await queue.obliterate({ force: true });
await queue.close();
