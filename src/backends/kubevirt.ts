// The `kubevirt` driver: a VirtualMachineInstance booted from a containerDisk, with cloud-init
// NoCloud user data (in a Secret) that writes the runner's identity and runs its runner once.
import type { RunnerRequest, RunnerBackend, RunnerStatus } from "../domain/backend.ts";
import type { KubeObject } from "./kubernetes/api.ts";
import { mergeTemplate } from "./kubernetes/merge.ts";
import { ownedMetadata, type ObjectNames } from "./kubernetes/names.ts";
import { phaseStatus, requireLaunch, runnerSecret, workloadDriver, type WorkloadOptions } from "./kubernetes/pod.ts";

export interface VmDriverOptions extends WorkloadOptions {
  image: string;
  template: unknown;
}

/** cloud-init user data, as the forge's launch says: identity and claim token to files (0600), the runner once, then power off. */
export function cloudInit(request: RunnerRequest): string {
  return requireLaunch(request).userData;
}

export function vmiManifest(names: ObjectNames, request: RunnerRequest, opts: Pick<VmDriverOptions, "image" | "template">): KubeObject {
  const base = {
    apiVersion: "kubevirt.io/v1",
    kind: "VirtualMachineInstance",
    metadata: ownedMetadata(names, request.assignment.id, request.pool?.name),
    spec: {
      terminationGracePeriodSeconds: 30,
      domain: {
        cpu: { cores: 2 },
        resources: { requests: { memory: "4Gi" } },
        devices: {
          disks: [
            { name: "containerdisk", disk: { bus: "virtio" } },
            { name: "cloudinitdisk", disk: { bus: "virtio" } },
          ],
        },
      },
      volumes: [
        { name: "containerdisk", containerDisk: { image: opts.image } },
        { name: "cloudinitdisk", cloudInitNoCloud: { secretRef: { name: names.name } } },
      ],
    },
  };
  return mergeTemplate(mergeTemplate(base, opts.template), request.pool?.template);
}

const VMI_PHASES = new Map<string, RunnerStatus | "ended">([
  ["Running", "ready"],
  ["Pending", "pending"],
  ["Scheduling", "pending"],
  ["Scheduled", "pending"],
  ["Succeeded", "ended"],
  ["Failed", "ended"],
  ["Unknown", "pending"],
]);

export function createVmDriver(opts: VmDriverOptions): RunnerBackend {
  const ns = encodeURIComponent(opts.namespace);
  return workloadDriver(opts, {
    collection: `/apis/kubevirt.io/v1/namespaces/${ns}/virtualmachineinstances`,
    secrets: `/api/v1/namespaces/${ns}/secrets`,
    manifest: (names, request) => vmiManifest(names, request, opts),
    secret: (names, request) => runnerSecret(names, request, { userdata: cloudInit(request) }),
    phase: (vmi) => phaseStatus(VMI_PHASES, vmi.status?.phase),
  });
}
