// What the kubernetes and kubevirt drivers make for forgejo-runner (FORGE=forgejo), against
// Kubernetes' and KubeVirt's own schemas: `one-job --handle <h> --wait` with a `file:` token URL
// from the Secret, the labels, and a warm runner that asks for its handle first. The shipped
// examples (examples/forgejo-runner.*) are exactly what the drivers make for a sample job
// (UPDATE_EXAMPLES=1 writes them again).
import { launched } from "../harness/launch.ts";
import { readFileSync, writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { cloudInit, vmiManifest } from "../../src/backends/kubevirt.ts";
import { objectNames } from "../../src/backends/kubernetes/names.ts";
import { podManifest, runnerSecret } from "../../src/backends/kubernetes/pod.ts";
import type { RunnerRequest } from "../../src/domain/backend.ts";
import { assignment, forgejoTestEnv } from "../harness/env.ts";
import { createRunnerBackend } from "../../src/app/select-backend.ts";
import { loadConfig } from "../../src/app/config.ts";
import { errorsOf, pod, secret, vmi } from "../harness/upstream.ts";

const HANDLE = "3f0c7a2e-5d2b-4a51-9a77-0d1f6b1c2d3e";
const TOKEN = "<the runner's token: POST /actions/runners answers it>";
const LABELS = ["ubuntu-latest:docker://node:22-bookworm", "it's-quoted"];
const IMAGE = "<an image with forgejo-runner 12.8 or newer>";

function request(id: string, warm = false): RunnerRequest {
  const base = `https://dispatch.example.org/v1/assignments/${id}`;
  return launched({
    assignment: assignment(id, LABELS),
    claimToken: "<the assignment's claim token>",
    claimUrl: `${base}/claim`,
    completeUrl: `${base}/complete`,
    forgejo: {
      url: "https://forgejo.example.org",
      uuid: "9b2f7a8e-0c1d-4e2f-8a3b-4c5d6e7f8a9b",
      token: TOKEN,
      labels: LABELS,
      ...(warm ? {} : { handle: HANDLE }),
    },
    ...(warm ? { handleUrl: `${base}/handle` } : {}),
  });
}

async function made(id: string, warm = false) {
  const names = await objectNames("gdr", id);
  const r = request(id, warm);
  return {
    pod: { secret: runnerSecret(names, r), pod: podManifest(names, r, { image: IMAGE, template: undefined }) },
    vm: {
      secret: runnerSecret(names, r, { userdata: cloudInit(r) }),
      vmi: vmiManifest(names, r, { image: "<a containerDisk with forgejo-runner>", template: undefined }),
    },
    userdata: cloudInit(r),
  };
}

function example(file: string, value: unknown): unknown {
  const path = `examples/${file}`;
  if (process.env.UPDATE_EXAMPLES) writeFileSync(path, typeof value === "string" ? value : `${JSON.stringify(value, null, 2)}\n`);
  const text = readFileSync(path, "utf8");
  return typeof value === "string" ? text : JSON.parse(text);
}

describe("forgejo-runner workloads", () => {
  it("a Pod runs one-job bound to its handle, with the token only in the Secret; both validate against Kubernetes", async () => {
    const { pod: p } = await made("forgejo-41-1");
    expect(errorsOf(pod, p.pod)).toEqual([]);
    expect(errorsOf(secret, p.secret)).toEqual([]);
    const container = (p.pod as { spec: { containers: { command: string[]; volumeMounts: { mountPath: string }[]; env: { name: string }[] }[] } }).spec
      .containers[0]!;
    const args = container.command.slice(4);
    expect(args).toEqual([
      "one-job",
      "--url",
      "https://forgejo.example.org",
      "--uuid",
      "9b2f7a8e-0c1d-4e2f-8a3b-4c5d6e7f8a9b",
      "--token-url",
      "file:/etc/forgejo-runner/token",
      "--label",
      LABELS[0],
      "--label",
      LABELS[1],
      "--handle",
      HANDLE,
      "--wait",
    ]);
    // Arguments reach the shell as "$@": a quote in a label is no command.
    expect(container.command.slice(0, 2)).toEqual(["/bin/sh", "-c"]);
    expect(container.command[2]).toContain('forgejo-runner "$@"');
    expect(container.volumeMounts[0]!.mountPath).toBe("/etc/forgejo-runner");
    expect(JSON.stringify(p.pod)).not.toContain(TOKEN);
    expect((p.secret as { stringData: Record<string, string> }).stringData).toEqual({ token: TOKEN, "claim-token": "<the assignment's claim token>" });
    expect(container.env.map((e) => e.name)).not.toContain("GDR_HANDLE_URL");
    expect(example("forgejo-runner.pod.json", p)).toEqual(p);
  });

  it("a warm runner's Pod asks for its handle first (GDR_HANDLE_URL) and passes it to one-job", async () => {
    const { pod: p } = await made("warm-small-0-x", true);
    expect(errorsOf(pod, p.pod)).toEqual([]);
    const container = (p.pod as { spec: { containers: { command: string[]; env: { name: string; value: string }[] }[] } }).spec.containers[0]!;
    expect(container.command).not.toContain("--handle");
    expect(container.env).toContainEqual({ name: "GDR_HANDLE_URL", value: "https://dispatch.example.org/v1/assignments/warm-small-0-x/handle" });
    expect(container.command[2]).toMatch(
      /while \[ -z "\$h" \]; do h=\$\(wget -q -O - --header "Authorization: Bearer \$\(cat \/etc\/forgejo-runner\/claim-token\)" "\$GDR_HANDLE_URL"\)/,
    );
    expect(container.command[2]).toContain('set -- "$@" --handle "$h"');
  });

  it("a VMI boots cloud-init from the Secret: token and claim token in 0600 files, one-job with every argument single-quoted, then power off", async () => {
    const { vm, userdata } = await made("forgejo-41-1");
    expect(errorsOf(vmi, vm.vmi)).toEqual([]);
    expect(errorsOf(secret, vm.secret)).toEqual([]);
    expect(JSON.stringify(vm.vmi)).not.toContain(TOKEN);
    const doc = parseYaml(userdata.replace(/^#cloud-config\n/, "")) as {
      write_files: { path: string; permissions: string; encoding?: string; content: string }[];
      runcmd: unknown[];
    };
    const files = doc.write_files.map((f) => ({
      path: f.path,
      mode: f.permissions,
      text: f.encoding === "b64" ? Buffer.from(f.content, "base64").toString("utf8") : f.content,
    }));
    expect(files.map((f) => [f.path, f.mode])).toEqual([
      ["/var/lib/forgejo-runner/token", "0600"],
      ["/var/lib/forgejo-runner/claim-token", "0600"],
      ["/var/lib/forgejo-runner/run.sh", "0700"],
    ]);
    expect(files[0]!.text).toBe(TOKEN);
    expect(files[2]!.text).toContain(`'--handle' '${HANDLE}'`);
    expect(files[2]!.text).toContain(`'it'\\''s-quoted'`);
    expect(files[2]!.text).not.toContain(TOKEN);
    expect(userdata).toContain("sh ./run.sh; poweroff");
    expect(example("forgejo-runner.vmi.json", vm)).toEqual(vm);
    expect(example("forgejo-runner.cloud-init.yaml", userdata)).toBe(userdata);
  });

  it("RUNNER_NAME_PREFIX names the Kubernetes objects with Forgejo too (near miss: unset, the default gdr)", async () => {
    const made = async (prefix?: string) => {
      const env = forgejoTestEnv("ws://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", {
        POD_DRIVER: "kubernetes",
        K8S_API_URL: "http://127.0.0.1:4",
        K8S_TOKEN: "k8s-token-0000",
        K8S_NAMESPACE: "runners",
        RUNNER_IMAGE: "registry.example.org/forgejo-runner:12.8",
        ...(prefix ? { RUNNER_NAME_PREFIX: prefix } : {}),
      });
      const config = loadConfig(env);
      const names: string[] = [];
      const doFetch = (async (url: string | URL | Request, init?: RequestInit) => {
        if (init?.method === "POST") names.push((JSON.parse(init.body as string) as { metadata: { name: string } }).metadata.name);
        return init?.method === "POST"
          ? new Response(init.body as string, { status: 201 })
          : new Response(JSON.stringify({ kind: "Status", code: 404 }), { status: 404 });
      }) as typeof fetch;
      await createRunnerBackend(config, config.backends[0]!, doFetch).accept(request("forgejo-41-1"), AbortSignal.timeout(5_000));
      return names;
    };
    const named = await made("acme-ci");
    expect(named.length).toBeGreaterThan(0);
    for (const name of named) expect(name).toMatch(/^acme-ci-/);
    for (const name of await made()) expect(name).toMatch(/^gdr-/);
  });
});
