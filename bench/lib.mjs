// Shared by the benchmark scripts: the Worker in `wrangler dev` on a free port, and percentiles.
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { createServer } from "node:net";
import { createInterface } from "node:readline";

export function freePort() {
  return new Promise((resolve) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Starts the Worker with `vars`; resolves once it serves. Collects its JSON log lines. */
export async function startWorker(vars, port) {
  port ??= await freePort();
  // Its own inspector port, so that several Workers can run side by side (the default is fixed).
  const args = ["wrangler", "dev", "--ip", "127.0.0.1", "--port", String(port), "--inspector-port", String(await freePort()), "--test-scheduled", "--show-interactive-dev-session=false"];
  for (const [k, v] of Object.entries({ ...vars, PUBLIC_URL: vars.PUBLIC_URL ?? `http://127.0.0.1:${port}` })) args.push("--var", `${k}:${v}`);
  const child = spawn("npx", args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, detached: true });
  const events = [];
  let ready;
  const isReady = new Promise((r) => (ready = r));
  for (const s of [child.stdout, child.stderr]) {
    createInterface({ input: s }).on("line", (line) => {
      if (process.env.BENCH_LOG) appendFileSync(process.env.BENCH_LOG, `${line}\n`);
      if (/ready on/i.test(line)) ready();
      const i = line.indexOf('{"event"');
      if (i >= 0) {
        try {
          events.push(JSON.parse(line.slice(i)));
        } catch {
          // not one of ours
        }
      }
    });
  }
  await isReady;
  return {
    url: `http://127.0.0.1:${port}`,
    events,
    async tick() {
      await (await fetch(`http://127.0.0.1:${port}/__scheduled?cron=*+*+*+*+*`)).arrayBuffer();
    },
    stop() {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        // already gone
      }
    },
  };
}

export function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs `fn(i)` for i < n with `concurrency` in flight; returns each call's latency in ms. */
export async function load(n, concurrency, fn) {
  const latencies = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        await fn(i);
        latencies.push(performance.now() - t);
      }
    }),
  );
  const elapsed = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return { rps: (n / elapsed) * 1000, p50: percentile(latencies, 50), p99: percentile(latencies, 99), elapsedMs: elapsed };
}
