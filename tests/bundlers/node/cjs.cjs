// A Node CommonJS consumer: `require("ternflow")` (Node >= 20.19 loads the ES module).
const { loadEngine, embed } = require("ternflow");

const e = loadEngine();
const v = e.embedMany(["hello from node"])[0];
console.log(JSON.stringify({
  kind: "cjs",
  dim: v.length,
  norm: Math.hypot(...v),
  same: Array.from(embed("hello from node")).every((x, i) => x === v[i]),
  modelId: e.modelId,
}));
