// The quick start's first command, as a new user meets it: a fresh clone, the machine's own Node
// 20 first on PATH, and a cache without Node 22. `./run start` must provision Node 22, install,
// and bring the dispatcher up; SIGTERM must stop all of it.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { freePort } from "../../bench/lib.mjs";

const SYSTEM_NODE = "/usr/bin/node";
const work = mkdtempSync(join(tmpdir(), "gdr-fresh-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

it("./run start from a fresh clone with Node 20 on PATH provisions Node 22, installs, and serves; SIGTERM stops it", { timeout: 420_000 }, async () => {
  const version = spawnSync(SYSTEM_NODE, ["--version"], { encoding: "utf8" }).stdout.trim();
  expect(version, "the machine's own Node is the old one a new user has").toMatch(/^v20\./);
  const clone = join(work, "clone");
  expect(spawnSync("git", ["clone", "-q", process.cwd(), clone]).status).toBe(0);
  // A cache without Node 22; nats-server is taken from the real cache only to spare the Debian
  // download (.ci/run provisions it on a fresh machine).
  const cache = join(work, "cache");
  mkdirSync(cache);
  const realNats = join(process.env.GDR_CACHE ?? join(homedir(), ".cache", "gdr"), "nats");
  if (existsSync(realNats)) symlinkSync(realNats, join(cache, "nats"));

  const port = await freePort();
  // The machine's environment (its CA and registry settings among it) as a new shell has it: no
  // Node 22 on PATH, nothing this test run's npm or .ci/env.sh exported.
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|NODE_OPTIONS$|NATS_SERVER_BIN$|GDR_|VITEST|PATH$)/i.test(k)));
  const env = {
    ...inherited,
    PATH: "/usr/bin:/bin",
    GDR_CACHE: cache,
    PORT: String(port),
    TICK_MS: "60000",
    DEV_VARS: "/nonexistent",
    ...(existsSync(realNats) ? {} : { NATS_SERVER_BIN: process.env.NATS_SERVER_BIN ?? "" }),
  };
  const child = spawn("./run", ["start"], { cwd: clone, env: env as unknown as NodeJS.ProcessEnv, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  try {
    const deadline = Date.now() + 360_000;
    while (!out.includes(`gitea-edge-dispatcher on http://127.0.0.1:${port}`)) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`./run start did not come up:\n${out.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(out).toContain("provisioning node@22");
    expect(out).toContain("installing dependencies (npm ci)");
    expect(out).not.toContain("gitea-edge-dispatcher needs Node.js");
    expect(readFileSync(join(clone, "node_modules/.gdr-installed"), "utf8")).toMatch(/^v22\.\d+\.\d+ [0-9a-f]{64}\n$/);
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true });
  } finally {
    // ./run execs npm, which npm start's own SIGTERM handling stops with everything it started.
    try {
      process.kill(child.pid!, "SIGTERM");
    } catch {
      // already gone
    }
    const stopBy = Date.now() + 30_000;
    while (child.exitCode === null && child.signalCode === null && Date.now() < stopBy) await new Promise((r) => setTimeout(r, 200));
  }
  expect(child.exitCode !== null || child.signalCode !== null).toBe(true);
  const stillServing = await fetch(`http://127.0.0.1:${port}/healthz`).then(
    () => true,
    () => false,
  );
  expect(stillServing).toBe(false);
});
