// scripts/runner-image.sh, the recipe's installer (docs/runner-image.md), run for real under a
// root of its own with the system steps left out: each runner program is installed only once its
// sha256 matches; a checksum one digit off, a missing one, or no runner at all installs nothing
// and says which variable to fix.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const PROGRAM = Buffer.from("#!/bin/sh\necho gitea-runner 2.0.0\n");
const SHA = createHash("sha256").update(PROGRAM).digest("hex");
let server: Server;
let url = "";
const roots: string[] = [];
beforeAll(async () => {
  server = createServer((req, res) => (req.url === "/gitea-runner" ? res.end(PROGRAM) : res.writeHead(404).end()));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => {
  server.close();
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

/** Runs the script (not with spawnSync: the download server is in this process). */
async function run(vars: Record<string, string>) {
  const root = mkdtempSync(join(tmpdir(), "gdr-image-"));
  roots.push(root);
  const env = { PATH: process.env.PATH!, GDR_IMAGE_ROOT: root, GDR_SKIP_SYSTEM: "1", ...vars } as unknown as NodeJS.ProcessEnv;
  const child = spawn("sh", ["scripts/runner-image.sh"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
  const status = await new Promise<number | null>((r) => child.on("close", r));
  return { status, stderr, bin: join(root, "usr/local/bin") };
}

describe("scripts/runner-image.sh", () => {
  it("installs a runner whose sha256 matches (in capitals too), executable, where the launch looks for it", async () => {
    const r = await run({ GITEA_RUNNER_URL: `${url}/gitea-runner`, GITEA_RUNNER_SHA256: SHA.toUpperCase() });
    expect([r.status, r.stderr]).toEqual([0, expect.stringContaining(`installed /usr/local/bin/gitea-runner (${SHA})`)]);
    expect(statSync(join(r.bin, "gitea-runner")).mode & 0o777).toBe(0o755);
  });

  it("near misses install nothing and name the variable: a checksum one digit off, none, no runner, a download that fails", async () => {
    const off = SHA.slice(0, -1) + (SHA.endsWith("0") ? "1" : "0");
    const cases: [Record<string, string>, RegExp][] = [
      [
        { GITEA_RUNNER_URL: `${url}/gitea-runner`, GITEA_RUNNER_SHA256: off },
        /the sha256 of GITEA_RUNNER_URL is [0-9a-f]{64}, not GITEA_RUNNER_SHA256: nothing installed/,
      ],
      [{ GITEA_RUNNER_URL: `${url}/gitea-runner` }, /GITEA_RUNNER_URL is set but GITEA_RUNNER_SHA256 is not/],
      [{}, /name at least one runner: GITEA_RUNNER_URL \+ GITEA_RUNNER_SHA256, or FORGEJO_RUNNER_URL \+ FORGEJO_RUNNER_SHA256/],
      [{ FORGEJO_RUNNER_URL: `${url}/missing`, FORGEJO_RUNNER_SHA256: SHA }, /could not download FORGEJO_RUNNER_URL/],
    ];
    for (const [vars, said] of cases) {
      const r = await run(vars);
      expect(r.status, JSON.stringify(vars)).toBe(1);
      expect(r.stderr).toMatch(said);
      expect(existsSync(join(r.bin, "gitea-runner")) || existsSync(join(r.bin, "forgejo-runner"))).toBe(false);
    }
  });
});
