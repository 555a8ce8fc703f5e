// The Gitea runner's launch (src/forge/gitea/launch.ts runScript) run by a real sh, with stand-in
// runner programs on PATH that record what they were started with: Gitea Runner 2.x's
// gitea-runner where it exists, act_runner otherwise, neither said with exit 127; `.runner` a
// regular file only its owner reads; GITEA_RUNNER_LABELS gone; the completion reported with the
// claim token whatever the runner's exit.
import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { runScript } from "../../src/forge/gitea/launch.ts";

const cleanups: (() => void)[] = [];
afterEach(() => cleanups.splice(0).forEach((c) => c()));

/** A runner stand-in: what it saw of `.runner` and its environment, and its arguments. */
const standIn = (name: string, rc: number) => `#!/bin/sh
{ echo "program=${name}"; echo "args=$*"; echo "mode=$(stat -c %a .runner)"; [ -L .runner ] && echo link=yes || echo link=no
  echo "labels=\${GITEA_RUNNER_LABELS-unset}"; echo "pwd=$(pwd)"; } > "$GDR_TEST_OUT"
exit ${rc}
`;

async function launch(programs: Record<string, number>) {
  const root = mkdtempSync(join(tmpdir(), "gdr-launch-"));
  cleanups.push(() => rmSync(root, { recursive: true, force: true }));
  const [secret, data, bin] = ["secret", "data", "bin"].map((d) => join(root, d)) as [string, string, string];
  for (const d of [secret, data, bin]) mkdirSync(d);
  writeFileSync(join(secret, ".runner"), JSON.stringify({ id: 7, uuid: "u", name: "gdr-gitea-1-1", token: "t", labels: ["ubuntu-latest:docker://node:20"] }));
  writeFileSync(join(secret, "claim-token"), "claim-token-0123");
  chmodSync(join(secret, ".runner"), 0o400); // as the Secret is mounted (defaultMode 0400)
  for (const [name, rc] of Object.entries(programs)) {
    writeFileSync(join(bin, name), standIn(name, rc));
    chmodSync(join(bin, name), 0o755);
  }
  const completions: string[] = [];
  const server = createServer((req, res) => {
    completions.push(`${req.method} ${req.headers.authorization}`);
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => server.close());
  const out = join(root, "out");
  const env = {
    // Only the stand-ins and the system's tools (sh, cp, chmod, stat, wget).
    PATH: `${bin}:/usr/bin:/bin`,
    GITEA_RUNNER_LABELS: "gpu:host",
    GDR_TEST_OUT: out,
    GDR_COMPLETE_URL: `http://127.0.0.1:${(server.address() as { port: number }).port}/complete`,
  };
  const result = await new Promise<{ code: number; stderr: string }>((resolve) =>
    execFile("/bin/sh", ["-c", runScript(secret, data)], { env: env as unknown as NodeJS.ProcessEnv }, (err, _stdout, stderr) =>
      resolve({ code: (err as { code?: number } | null)?.code ?? 0, stderr }),
    ),
  );
  const seen = existsSync(out)
    ? Object.fromEntries(
        readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => l.split(/=(.*)/s).slice(0, 2) as [string, string]),
      )
    : {};
  return { ...result, seen, completions, data };
}

describe("the Gitea runner's launch (sh)", () => {
  it("starts gitea-runner where it exists, in the data directory, with a 0600 regular .runner and no GITEA_RUNNER_LABELS; reports completion", async () => {
    const r = await launch({ "gitea-runner": 0, act_runner: 0 });
    expect(r.code).toBe(0);
    expect(r.seen).toEqual({ program: "gitea-runner", args: "daemon", mode: "600", link: "no", labels: "unset", pwd: r.data });
    expect(r.completions).toEqual(["POST Bearer claim-token-0123"]);
  });

  it("starts act_runner when it is the only one, and keeps the runner's exit code after reporting", async () => {
    const r = await launch({ act_runner: 3 });
    expect([r.code, r.seen.program, r.seen.mode, r.seen.labels]).toEqual([3, "act_runner", "600", "unset"]);
    expect(r.completions).toHaveLength(1);
  });

  it("neither installed: exit 127, saying which programs it looked for, and no completion reported", async () => {
    const r = await launch({});
    expect([r.code, r.stderr.trim()]).toEqual([127, "gdr: neither gitea-runner nor act_runner is installed"]);
    expect(r.completions).toEqual([]);
  });
});
