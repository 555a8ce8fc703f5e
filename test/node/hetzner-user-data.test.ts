// What a Hetzner server is given: user_data with the bootstrap URL and a one-time token only, and
// the launch the bootstrap hands out (files 0600, the runner's environment, its command); the
// fake's simulated runner reads both as a shell would, so the two cannot drift apart.
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
});
