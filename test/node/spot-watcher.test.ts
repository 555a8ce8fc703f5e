// The watcher the ec2 launch starts beside the runner, run by a real sh with curl against an
// IMDSv2 that follows EC2's (a session token by PUT, 401 without it, spot/instance-action 404
// until a notice): it stops the runner (the exec'd process) before it reports, and POSTs the
// notice as IMDS gave it, with the claim token, retrying a refused report.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { spotWatcher } from "../../src/backends/user-data.ts";

const closers: (() => void)[] = [];
afterEach(() => closers.splice(0).forEach((c) => c()));

async function serve(handle: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => handle(req, body, res));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

describe("the spot watcher (sh + curl)", () => {
  it("on a notice stops the runner, then reports the notice with the claim token; a refused report is tried again", { timeout: 30_000 }, async () => {
    const notice = { action: "terminate", time: "2026-12-06T01:19:48Z" };
    let noticeUp = false;
    const tokens = new Set<string>();
    const imds = await serve((req, _body, res) => {
      if (req.method === "PUT" && req.url === "/latest/api/token") {
        if (!req.headers["x-aws-ec2-metadata-token-ttl-seconds"]) return res.writeHead(400).end();
        const t = `s${tokens.size}`;
        tokens.add(t);
        return res.writeHead(200).end(t);
      }
      if (!tokens.has(String(req.headers["x-aws-ec2-metadata-token"]))) return res.writeHead(401).end();
      if (req.url === "/latest/meta-data/spot/instance-action" && noticeUp) return res.writeHead(200).end(JSON.stringify(notice));
      return res.writeHead(404).end();
    });
    const reports: { auth?: string; type?: string; body: string; runnerAlive: boolean }[] = [];
    const proc: { runner?: ReturnType<typeof spawn> } = {};
    const worker = await serve((req, body, res) => {
      reports.push({
        auth: req.headers.authorization,
        type: req.headers["content-type"],
        body,
        runnerAlive: proc.runner?.exitCode === null && proc.runner.signalCode === null,
      });
      res.writeHead(reports.length === 1 ? 503 : 200).end("{}");
    });
    const dir = mkdtempSync(join(tmpdir(), "gdr-watch-"));
    writeFileSync(join(dir, "claim-token"), "abc.def");
    const script = [...spotWatcher(join(dir, "claim-token")), "exec sleep 60"].join("\n");
    const runner = (proc.runner = spawn("sh", ["-c", script], {
      env: { PATH: process.env.PATH, GDR_IMDS_URL: imds, GDR_INTERRUPT_URL: `${worker}/v1/assignments/a/interrupt` } as unknown as NodeJS.ProcessEnv,
      stdio: "ignore",
    }));
    closers.push(() => runner.kill("SIGKILL"));
    const exited = new Promise<string | null>((r) => runner.on("exit", (_code, signal) => r(signal)));
    // No notice yet: nothing is reported, and the runner runs on.
    await new Promise((r) => setTimeout(r, 6_000));
    expect([reports.length, runner.exitCode, runner.signalCode]).toEqual([0, null, null]);
    noticeUp = true;
    expect(await exited).toBe("SIGTERM");
    const deadline = Date.now() + 15_000;
    while (reports.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(reports).toHaveLength(2);
    for (const r of reports) expect(r).toEqual({ auth: "Bearer abc.def", type: "application/json", body: JSON.stringify(notice), runnerAlive: false });
  });
});
