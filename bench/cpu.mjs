// CPU accounting for the benchmarks, from Linux /proc: how many CPU milliseconds each thread of a
// process tree (Chromium's, the server's) spent between two snapshots, grouped by process type and
// thread name. It answers "where did the time go that the engine did not get" without a profiler.
import { readFileSync, readdirSync } from "node:fs";
import { execFileSync } from "node:child_process";

const PER_THREAD = process.env.BENCH_CPU_THREADS === "1";
const HZ = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

// Fields after the parenthesised comm (which may hold spaces): state is field 3, ppid 4, utime 14, stime 15.
function stat(path) {
  const s = readFileSync(path, "utf8");
  const close = s.lastIndexOf(")");
  const comm = s.slice(s.indexOf("(") + 1, close);
  const f = s.slice(close + 2).split(" ");
  return { comm, ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) };
}

function processType(pid) {
  try {
    // Chromium rewrites its children's command lines into one space-separated string.
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split(/[\0 ]/);
    const t = argv.find((a) => a.startsWith("--type="));
    if (!t) return "main";
    const sub = argv.find((a) => a.startsWith("--utility-sub-type="));
    return t.slice(7) + (sub ? ":" + sub.slice(20).replace(/^.*\./, "") : "");
  } catch {
    return "?";
  }
}

// Every process now: pid -> { comm, ppid }.
function processes() {
  const procs = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      procs.set(Number(d), stat(`/proc/${d}/stat`));
    } catch {}
  }
  return procs;
}

// Every thread of every process under the given roots: key "label/type/thread" -> CPU ms.
export function snapshot(roots) {
  const procs = processes();
  const out = new Map();
  for (const [label, root] of Object.entries(roots)) {
    const mine = new Set([root]);
    let grew = true;
    while (grew) {
      grew = false;
      for (const [pid, { ppid }] of procs) if (!mine.has(pid) && mine.has(ppid)) { mine.add(pid); grew = true; }
    }
    for (const pid of mine) {
      const type = processType(pid);
      let tids = [];
      try { tids = readdirSync(`/proc/${pid}/task`); } catch { continue; }
      for (const tid of tids) {
        try {
          const t = stat(`/proc/${pid}/task/${tid}/stat`);
          // Worker threads are numbered in their names; the number says nothing across runs.
          // BENCH_CPU_THREADS=1 keeps one row per web worker thread (its tid), to tell the
          // pipeline's thread from its engine worker's.
          const name = t.comm.replace(/[\d/]+$/, "");
          const key = `${label}/${type}/${name}${PER_THREAD && name === "DedicatedWorker" ? "#" + tid : ""}`;
          out.set(key, (out.get(key) ?? 0) + (t.ticks * 1000) / HZ);
        } catch {}
      }
    }
  }
  return out;
}

// What each key spent between two snapshots (threads that ended in between are lost: say so).
export function diff(a, b) {
  const d = new Map();
  for (const [k, v] of b) {
    const x = v - (a.get(k) ?? 0);
    if (x > 0) d.set(k, x);
  }
  return d;
}

// One line: per-job CPU ms of the largest groups, the rest summed, and how busy the cores were.
export function describe(d, jobs, wallMs, cores, top = 7) {
  const rows = [...d].sort((x, y) => y[1] - x[1]);
  const total = rows.reduce((s, [, v]) => s + v, 0);
  const shown = rows.slice(0, top).map(([k, v]) => `${k} ${(v / jobs).toFixed(3)}`);
  const rest = rows.slice(top).reduce((s, [, v]) => s + v, 0);
  if (rest > 0) shown.push(`other ${(rest / jobs).toFixed(3)}`);
  return `${(total / jobs).toFixed(3)} ms CPU per job = ${((100 * total) / (wallMs * cores)).toFixed(1)}% of ${cores} cores over the phase: ${shown.join(", ")}`;
}

// The pids of a process's children whose name starts with prefix (e.g. the browser Playwright started).
export function children(ppid, prefix) {
  return [...processes()].filter(([, s]) => s.ppid === ppid && s.comm.startsWith(prefix)).map(([pid]) => pid);
}
