// `PORT=… bun run bun-serve.mjs`: the package's edge handler behind Bun.serve, unchanged.
import ternflow from "ternflow";

const server = Bun.serve({ hostname: "127.0.0.1", port: Number(process.env.PORT), fetch: ternflow.fetch });
console.log(`listening on ${server.url}`);
