// What the kubernetes and kubevirt drivers ask the cluster for.
import { launched } from "../harness/launch.ts";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { cloudInit, vmiManifest } from "../../src/backends/kubevirt.ts";
import { mergeTemplate } from "../../src/backends/kubernetes/merge.ts";
import { objectNames } from "../../src/backends/kubernetes/names.ts";
import { DEFAULT_RUNNER_IMAGE, podManifest, runnerSecret } from "../../src/backends/kubernetes/pod.ts";
import type { RunnerRequest } from "../../src/domain/backend.ts";
import { assignment } from "../harness/env.ts";

const request: RunnerRequest = launched({
  assignment: assignment("gitea-1187-1"),
  claimToken: "claim-token-secret",
  claimUrl: "https://d.example.org/v1/assignments/gitea-1187-1/claim",
  completeUrl: "https://d.example.org/v1/assignments/gitea-1187-1/complete",
  runner: {
    WARNING: "w",
    id: 7,
    uuid: "uuid-7",
    name: "gdr-gitea-1187-1",
    token: "runner-token-secret",
    address: "https://g",
    labels: ["ubuntu-latest:docker://node:20"],
    ephemeral: true,
  },
});
const template = JSON.parse(readFileSync("examples/pod-template.dind.json", "utf8"));

const NAMES = { name: "gdr-gitea-1187-1", label: "gitea-1187-1" };

describe("object names", () => {
  it("are the runner name for the usual ids, and stay valid DNS labels for odd ones", async () => {
    expect(await objectNames("gdr", "gitea-1187-1")).toEqual(NAMES);
    const odd = await objectNames("gdr", "Job_With.Dots_And_Caps-" + "x".repeat(100));
    expect(odd.name).toMatch(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/);
    expect(odd.name).not.toBe((await objectNames("gdr", "Job_With.Dots_And_Caps-" + "x".repeat(99))).name);
  });
});

describe("pod manifest", () => {
  it("is refused without a forge's launch (no runner identity), for the Pod, the VM and their Secret", () => {
    const bare = { ...request, launch: undefined };
    expect(() => podManifest(NAMES, bare, { image: DEFAULT_RUNNER_IMAGE, template: undefined })).toThrow(/no runner identity/);
    expect(() => runnerSecret(NAMES, bare)).toThrow(/no runner identity/);
    expect(() => cloudInit(bare)).toThrow(/no runner identity/);
  });

  it("mounts the identity from the Secret and carries none of it in its spec", () => {
    const pod = podManifest(NAMES, request, { image: DEFAULT_RUNNER_IMAGE, template: undefined });
    const text = JSON.stringify(pod);
    for (const secret of ["runner-token-secret", "uuid-7", "claim-token-secret"]) expect(text).not.toContain(secret);
    expect(pod).toMatchObject({
      metadata: {
        name: "gdr-gitea-1187-1",
        labels: { "app.kubernetes.io/managed-by": "gitea-edge-dispatcher", "gitea-edge-dispatcher/assignment": "gitea-1187-1" },
      },
      spec: { restartPolicy: "Never", automountServiceAccountToken: false, volumes: [{ name: "runner-identity", secret: { secretName: "gdr-gitea-1187-1" } }] },
    });
    const secret = runnerSecret(NAMES, request) as { stringData: Record<string, string> };
    expect(JSON.parse(secret.stringData[".runner"]!)).toEqual(request.runner);
    expect(secret.stringData["claim-token"]).toBe("claim-token-secret");
  });

  it("merges the docker-in-docker template of docs/backends.md: sidecar, env by name, resources, scheduling", () => {
    const pod = podManifest({ name: "p", label: "p" }, request, { image: "img", template }) as { spec: Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any -- a manifest, read as the JSON it is;
    const runner = pod.spec.containers.find((c: { name: string }) => c.name === "runner");
    expect(pod.spec.containers).toHaveLength(1);
    expect(runner.image).toBe("img");
    expect(runner.env.map((e: { name: string }) => e.name)).toEqual([
      "GDR_ASSIGNMENT_ID",
      "GDR_CLAIM_URL",
      "GDR_COMPLETE_URL",
      "DOCKER_HOST",
      "DOCKER_TLS_VERIFY",
      "DOCKER_CERT_PATH",
    ]);
    expect(runner.volumeMounts.map((v: { name: string }) => v.name)).toEqual(["runner-identity", "docker-certs"]);
    expect(runner.resources.limits.memory).toBe("4Gi");
    expect(pod.spec.initContainers[0]).toMatchObject({ name: "dind", restartPolicy: "Always", securityContext: { privileged: true } });
    expect(pod.spec.volumes.map((v: { name: string }) => v.name)).toEqual(["runner-identity", "docker-certs", "docker-data"]);
    expect(pod.spec).toMatchObject({ serviceAccountName: "gitea-runner", restartPolicy: "Never", nodeSelector: { "kubernetes.io/os": "linux" } });
  });

  it("merges objects deeply, named lists by name, and replaces other lists", () => {
    expect(mergeTemplate({ a: { b: 1, c: [1, 2] }, l: [{ name: "x", v: 1 }] }, { a: { c: [3] }, l: [{ name: "x", w: 2 }, { name: "y" }] })).toEqual({
      a: { b: 1, c: [3] },
      l: [{ name: "x", v: 1, w: 2 }, { name: "y" }],
    });
  });
});

describe("kubevirt manifest", () => {
  it("boots the containerDisk with cloud-init from the Secret; the identity only in the Secret's user data", () => {
    const vmi = vmiManifest(NAMES, request, {
      image: "registry.example.org/runner-vm:1",
      template: { spec: { domain: { resources: { requests: { memory: "8Gi" } } } } },
    });
    const text = JSON.stringify(vmi);
    for (const secret of ["runner-token-secret", "uuid-7", "claim-token-secret"]) expect(text).not.toContain(secret);
    expect(vmi).toMatchObject({
      apiVersion: "kubevirt.io/v1",
      kind: "VirtualMachineInstance",
      spec: {
        domain: { resources: { requests: { memory: "8Gi" } } },
        volumes: [
          { name: "containerdisk", containerDisk: { image: "registry.example.org/runner-vm:1" } },
          { name: "cloudinitdisk", cloudInitNoCloud: { secretRef: { name: "gdr-gitea-1187-1" } } },
        ],
      },
    });
    const userData = cloudInit(request);
    expect(userData.startsWith("#cloud-config\n")).toBe(true);
    const encoded = /content: (\S+)/.exec(userData)![1]!;
    expect(JSON.parse(atob(encoded))).toEqual(request.runner);
    expect(userData).toContain(`"$R" daemon`);
    expect(userData).not.toContain("runner-token-secret");
  });
});
