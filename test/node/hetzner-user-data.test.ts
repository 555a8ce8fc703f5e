// What a Hetzner server is given: user_data with the bootstrap URL and a one-time token only, and
// the launch the bootstrap hands out (files 0600, the runner's environment, its command); the
// fake's simulated runner reads both as a shell would, so the two cannot drift apart.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { bootUserData, launchScript, runnerProgram } from "../../src/backends/user-data.ts";
import { bootOf, readLaunch } from "../../scripts/simulate-hetzner.mjs";
import { vmRequest } from "../harness/hetzner.ts";
import type { RunnerRequest } from "../../src/domain/backend.ts";

const url = "https://dispatch.example.org/v1/assignments/gitea-7-1";
const request = vmRequest("gitea-7-1");
const identity = request.runner!;

describe("hetzner user_data and launch", () => {
  it("user_data carries the URL and token, no identity; under 32 KiB with a download", () => {
    const data = bootUserData(request.bootstrapUrl!, "T".repeat(43), runnerProgram(request), {
      url: "https://x.example.org/act_runner",
      sha256: "a".repeat(64),
    });
    expect(bootOf(data)).toEqual({ url: `${url}/bootstrap`, token: "T".repeat(43) });
    for (const secret of [identity.token, identity.uuid, "claim-gitea-7-1"]) expect(data).not.toContain(secret);
    expect(data).toContain(`echo '${"a".repeat(64)}  /usr/local/bin/gitea-runner.part' | sha256sum -c -`);
    expect(data.startsWith("#!/bin/sh\n")).toBe(true);
    expect(new TextEncoder().encode(data).length).toBeLessThan(4096);
    expect(runnerProgram({ ...request, runner: undefined, forgejo: { url: "u", uuid: "u", token: "t", labels: [] } } as RunnerRequest)).toBe("forgejo-runner");
  });

  it("the launch writes the forge's files where its command reads them, and its URLs; a quote in a value stays inside it", () => {
    const script = launchScript({ ...request, handleUrl: `${url}/handle?x='y'` }, request.launch!);
    const { files, env } = readLaunch(launchScript(request, request.launch!));
    expect(JSON.parse(files[".runner"]!)).toEqual(identity);
    expect(files["claim-token"]).toBe("claim-gitea-7-1");
    expect(env).toMatchObject({ GDR_ASSIGNMENT_ID: "gitea-7-1", GDR_CLAIM_URL: `${url}/claim`, GDR_COMPLETE_URL: `${url}/complete` });
    expect(script).toContain(`export GDR_HANDLE_URL='${url}/handle?x='\\''y'\\'''`);
    expect(script).toContain("umask 077");
    expect(script).toMatch(/^exec '\/bin\/sh' '-c' /m);
  });

  it("the one-time token is unset before the launch runs: the launch (and the runner it starts) cannot read it", () => {
    const dir = mkdtempSync(join(tmpdir(), "gdr-boot-"));
    // A curl that hands out a launch printing what it can see of the token.
    writeFileSync(join(dir, "curl"), `#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\nprintf 'echo "token=\${token-unset}"\n' > "$2"\n`, { mode: 0o755 });
    const data = bootUserData(request.bootstrapUrl!, "T".repeat(43), runnerProgram(request)).replaceAll("/run/", `${dir}/`);
    const run = spawnSync("sh", ["-c", data], { encoding: "utf8", env: { PATH: `${dir}:/usr/bin:/bin` } as unknown as NodeJS.ProcessEnv });
    expect(run.stderr).toBe("");
    expect(run.stdout.trim()).toBe("token=unset");
    expect(run.stdout).not.toContain("T".repeat(43));
    // Unset in the boot shell itself, after the fetch and before the exec: exported by a later edit, it still goes.
    const lines = data.split("\n");
    const unset = lines.indexOf("unset token");
    expect(unset).toBeGreaterThan(lines.findIndex((l) => l.startsWith("until fetch_launch")));
    expect(unset).toBe(lines.findIndex((l) => l.startsWith("exec sh ")) - 1);
    const exported = spawnSync("sh", ["-c", data.replace("token='", "export token='")], {
      encoding: "utf8",
      env: { PATH: `${dir}:/usr/bin:/bin` } as unknown as NodeJS.ProcessEnv,
    });
    expect(exported.stdout.trim()).toBe("token=unset");
  });
});
