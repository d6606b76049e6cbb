// The edge handler (the default export under the `deno` and `bun` conditions) called directly,
// as `export default` recipes do (through `ternflow`, or the specifier given as the first argument):
// one POST, the same again, then a bad request; prints one JSON line.
const t0 = performance.now();
const which = globalThis.Deno?.args?.[0] ?? globalThis.process?.argv?.[2] ?? "ternflow";
const { default: handler } = await import(which);
const post = (body) => handler.fetch(new Request("http://edge/", { method: "POST", body: JSON.stringify(body) }));
const r = await post({ texts: ["hello from a runtime"] });
const firstVectorMs = performance.now() - t0;
const body = await r.json();
const again = await (await post({ texts: ["hello from a runtime"] })).json();
const bad = await post({ texts: "not an array" });
console.log(JSON.stringify({
  status: r.status, body, firstVectorMs, againSources: again.sources, badStatus: bad.status, badCode: (await bad.json()).error?.code,
}));
