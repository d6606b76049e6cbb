// The Node entry's types (the `node` condition under NodeNext resolution): synchronous.
import { loadEngine, type Engine } from "ternflow";

const e: Engine = loadEngine();
const v: Float32Array = e.embed("hello");
const hits = e.similar("q", ["a"], { topK: 1 });
export const n: number = v.length + (hits[0]?.sim ?? 0);
