// `npm start` as a new user runs it: it must pass no secret on a command line, and a SIGTERM to
// npm or to start.mjs must stop everything it started (wrangler, workerd, nats-server, the fakes)
// and free the port, so that the next `npm start` can bind it.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createConnection } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort } from "../../bench/lib.mjs";

const TOKEN = `start-test-${Math.random().toString(36).slice(2)}-dispatch`;

/** Every process: pid, parent, state and command line, from `ps` (Linux and macOS alike). */
function processes(): { pid: number; ppid: number; stat: string; command: string }[] {
  const out = execFileSync("ps", ["-A", "-ww", "-o", "pid=,ppid=,stat=,command="], { encoding: "utf8" });
  return out
    .split("\n")
    .map((l) => /^\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(l))
    .filter((m) => m)
    .map((m) => ({ pid: Number(m![1]), ppid: Number(m![2]), stat: m![3]!, command: m![4]! }));
}

/** Every live descendant of `pid`. */
function descendants(pid: number): number[] {
  const all = processes();
  const found: number[] = [];
  const walk = (p: number) => {
    for (const c of all) {
      if (c.ppid !== p) continue;
      found.push(c.pid);
      walk(c.pid);
    }
  };
  walk(pid);
  return found;
}

const cmdline = (pid: number) => processes().find((p) => p.pid === pid)?.command ?? "";
const alive = (pid: number) => {
  const p = processes().find((x) => x.pid === pid);
  return p !== undefined && !p.stat.startsWith("Z");
};
const portOpen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port }, () => (s.destroy(), resolve(true)));
    s.on("error", () => resolve(false));
  });

async function startNpm(port: number, extra: Record<string, string> = {}): Promise<{ npm: ChildProcess; output: () => string }> {
  const npm = spawn("npm", ["start"], {
    env: { ...process.env, PORT: String(port), TICK_MS: "60000", DISPATCH_TOKEN: TOKEN, DEV_VARS: "/nonexistent", ...extra },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  npm.stdout.on("data", (d) => (out += d));
  npm.stderr.on("data", (d) => (out += d));
  const deadline = Date.now() + 90_000;
  while (!out.includes(`gitea-edge-dispatcher on http://127.0.0.1:${port}`)) {
    if (Date.now() > deadline || npm.exitCode !== null) throw new Error(`npm start did not come up:\n${out.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return { npm, output: () => out };
}

/**
 * startNpm on a free port, again on another when the one picked was taken before the Worker bound
 * it (other suites start Workers and servers on ports of their own meanwhile).
 */
async function startOnFreePort(extra: Record<string, string>): Promise<{ port: number; npm: ChildProcess; output: () => string }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return { port, ...(await startNpm(port, extra)) };
    } catch (err) {
      if (attempt >= 3 || !/Address already in use \(127\.0\.0\.1:\d+\)/.test((err as Error).message)) throw err;
    }
  }
}

describe("npm start", () => {
  for (const target of ["npm", "start.mjs"] as const) {
    // One run with EAGER_RECONCILE=false, one without: the variable reaches the Worker.
    const eager = target === "start.mjs";
    it(
      `stops everything it started and frees the port on SIGTERM to ${target}; no secret on a command line; EAGER_RECONCILE=${eager} is passed on`,
      { timeout: 150_000 },
      async () => {
        const { port, npm, output } = await startOnFreePort(eager ? {} : { EAGER_RECONCILE: "false", NATS_GATEWAY: "off" });
        const tree = descendants(npm.pid!);
        expect(tree.some((p) => cmdline(p).includes("workerd"))).toBe(true);
        expect(tree.some((p) => cmdline(p).includes("nats-server"))).toBe(true);
        // The token is printed for the user to copy, but no process shows it to `ps`.
        expect(output()).toContain(TOKEN);
        expect([npm.pid!, ...tree].filter((p) => cmdline(p).includes(TOKEN))).toEqual([]);
        expect(await portOpen(port)).toBe(true);
        // It prints the status page's URL and password, and they open the page.
        const printed = /Status page: (http:\S+\/status) +\(any user name, password: (\S+)\)/.exec(output());
        expect(printed?.[1]).toBe(`http://127.0.0.1:${port}/status`);
        expect([npm.pid!, ...tree].filter((p) => cmdline(p).includes(printed![2]!))).toEqual([]);
        const page = await fetch(printed![1]!, { headers: { authorization: `Basic ${btoa(`me:${printed![2]}`)}` } });
        expect(page.status).toBe(200);
        expect(await page.text()).toContain("slots used");
        // The demo's signed delivery is a file the printed curl reads; it goes when npm start stops.
        const webhookFile = /--data-binary @(\S+)/.exec(output())?.[1];
        expect(webhookFile && existsSync(webhookFile)).toBe(true);
        // The hand-published demo assignment is explained: no job behind it, so never claimed.
        expect(output()).toMatch(/demo-1 stays backend_ready \(never claimed\) until its claim timeout/);
        // No cron tick for a minute: only an eager pass provisions an assignment now.
        const api = (path: string, init: RequestInit = {}) =>
          fetch(`http://127.0.0.1:${port}${path}`, { ...init, headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" } });
        expect(
          (await api("/v1/assignments", { method: "POST", body: JSON.stringify({ version: 1, id: "start-1", backend: "pod", labels: ["x"] }) })).status,
        ).toBe(202);
        await new Promise((r) => setTimeout(r, 4_000));
        const { state } = (await (await api("/v1/assignments/start-1")).json()) as { state: string };
        if (eager) expect(["backend_pending", "backend_ready", "claimed", "completed"]).toContain(state);
        else expect(state).toBe("received");

        const victim = target === "npm" ? npm.pid! : tree.find((p) => cmdline(p).includes("scripts/start.mjs"))!;
        process.kill(victim, "SIGTERM");
        const deadline = Date.now() + 30_000;
        while ([npm.pid!, ...tree].some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
        expect([npm.pid!, ...tree].filter(alive).map((p) => `${p} ${cmdline(p).slice(0, 80)}`)).toEqual([]);
        expect(await portOpen(port)).toBe(false);
        expect(existsSync(webhookFile!)).toBe(false);
      },
    );
  }
});
