// The Worker served over HTTP by `wrangler dev` (workerd, with wrangler's local R2 in a directory of
// its own), for a client that must run in Node: @actions/cache speaks to it as a job would. Its
// variables go in a file only this user can read; the process group is stopped after.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

const quote = (v: string) => `"${v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n")}"`;

export interface DevWorker {
  url: string;
  lines: string[];
  stop(): Promise<void>;
}

/** `varsAt(url)`: the Worker's variables, knowing where it will answer (its PUBLIC_URL). */
export async function startWranglerDev(varsAt: (url: string) => Record<string, string>, timeoutMs = 60_000): Promise<DevWorker> {
  const dir = mkdtempSync(join(tmpdir(), "gdr-dev-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const vars = varsAt(url);
  const envFile = join(dir, "worker.env");
  writeFileSync(
    envFile,
    Object.entries(vars)
      .map(([k, v]) => `${k}=${quote(v)}`)
      .join("\n") + "\n",
    { mode: 0o600 },
  );
  const args = [
    "dev",
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--show-interactive-dev-session=false",
    "--env-file",
    envFile,
    "--persist-to",
    join(dir, "state"),
  ];
  const child = spawn("node_modules/.bin/wrangler", args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
    detached: true,
  });
  const lines: string[] = [];
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`wrangler dev was not ready in ${timeoutMs} ms:\n${lines.slice(-20).join("\n")}`)), timeoutMs);
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on("line", (line) => {
        lines.push(line);
        if (/ready on/i.test(line)) {
          clearTimeout(timer);
          resolve();
        }
      });
    }
    child.once("exit", (code) => reject(new Error(`wrangler dev exited (${code}):\n${lines.slice(-20).join("\n")}`)));
  });
  const stop = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      try {
        process.kill(-child.pid!, "SIGTERM");
      } catch {
        // gone already
      }
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await ready;
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, lines, stop };
}
