// The `kubernetes` driver: one Secret (the runner's identity and claim token) and one Pod running
// the runner program from that identity, per assignment, as the forge's launch says (RunnerLaunch:
// which program, which files). The Pod reads the identity from the Secret only.
import { BackendError, type RunnerBackend, type RunnerLaunch, type RunnerRequest, type RunnerStatus } from "../../domain/backend.ts";
import type { KubeApi, KubeObject } from "./api.ts";
import { mergeTemplate } from "./merge.ts";
import { objectNames, ownedMetadata, type ObjectNames } from "./names.ts";
export { DEFAULT_RUNNER_IMAGE } from "./settings.ts";

export interface WorkloadOptions {
  api: KubeApi;
  namespace: string;
  /** RUNNER_NAME_PREFIX: object names derive from the runner name. */
  prefix: string;
}

export interface PodDriverOptions extends WorkloadOptions {
  image: string;
  template: unknown;
}

/** The Secret both drivers create: the launch's files (the runner's identity, the claim token), never in the workload's spec. */
export function runnerSecret(names: ObjectNames, request: RunnerRequest, extra: Record<string, string> = {}): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: ownedMetadata(names, request.assignment.id),
    stringData: { ...requireLaunch(request).files, ...extra },
  };
}

export function requireLaunch(request: RunnerRequest): RunnerLaunch {
  if (!request.launch) throw new BackendError("no runner identity: the kubernetes and kubevirt drivers need a forge (GITEA_URL)");
  return request.launch;
}

export function podManifest(names: ObjectNames, request: RunnerRequest, opts: Pick<PodDriverOptions, "image" | "template">): KubeObject {
  const { command, mountPath } = requireLaunch(request);
  const base = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: ownedMetadata(names, request.assignment.id, request.pool?.name),
    spec: {
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      containers: [
        {
          name: "runner",
          image: opts.image,
          command,
          env: [
            { name: "GDR_ASSIGNMENT_ID", value: request.assignment.id },
            { name: "GDR_CLAIM_URL", value: request.claimUrl },
            { name: "GDR_COMPLETE_URL", value: request.completeUrl },
            ...(request.handleUrl ? [{ name: "GDR_HANDLE_URL", value: request.handleUrl }] : []),
          ],
          volumeMounts: [{ name: "runner-identity", mountPath, readOnly: true }],
        },
      ],
      volumes: [{ name: "runner-identity", secret: { secretName: names.name, defaultMode: 0o400 } }],
    },
  };
  return mergeTemplate(mergeTemplate(base, opts.template), request.pool?.template);
}

const POD_PHASES = new Map<string, RunnerStatus | "ended">([
  ["Running", "ready"],
  ["Pending", "pending"],
  ["Succeeded", "ended"],
  ["Failed", "ended"],
  ["Unknown", "pending"],
]);

/** What a workload's phase means to us; a phase we do not know (or none yet) is pending. */
export function phaseStatus(phases: ReadonlyMap<string, RunnerStatus | "ended">, phase: unknown): RunnerStatus | "ended" {
  return (typeof phase === "string" && phases.get(phase)) || "pending";
}

export function createPodDriver(opts: PodDriverOptions): RunnerBackend {
  const ns = `/api/v1/namespaces/${encodeURIComponent(opts.namespace)}`;
  return workloadDriver(opts, {
    collection: `${ns}/pods`,
    manifest: (names, request) => podManifest(names, request, opts),
    secret: (names, request) => runnerSecret(names, request),
    phase: (pod) => phaseStatus(POD_PHASES, pod.status?.phase),
    secrets: `${ns}/secrets`,
  });
}

export interface WorkloadKind {
  collection: string;
  secrets: string;
  manifest(names: ObjectNames, request: RunnerRequest): KubeObject;
  secret(names: ObjectNames, request: RunnerRequest): KubeObject;
  phase(object: KubeObject): RunnerStatus | "ended";
}

/** Accept and teardown of "a Secret plus one workload object", shared by pods and VMIs. */
export function workloadDriver(opts: WorkloadOptions, kind: WorkloadKind): RunnerBackend {
  return {
    async accept(request, signal) {
      const names = await objectNames(opts.prefix, request.assignment.id);
      const { name } = names;
      const existing = await opts.api.get(`${kind.collection}/${name}`, signal);
      if (existing) {
        const phase = kind.phase(existing);
        if (phase !== "ended") return phase;
        // It ran and ended before anybody claimed it: remove it so the next delivery starts afresh.
        await opts.api.remove(`${kind.collection}/${name}`, signal);
        throw new BackendError(`workload ended (${existing.status?.phase}) before the claim; recreating`);
      }
      const secret = kind.secret(names, request);
      if (!(await opts.api.create(kind.secrets, secret, signal))) await opts.api.replace(`${kind.secrets}/${name}`, secret, signal);
      await opts.api.create(kind.collection, kind.manifest(names, request), signal);
      return "pending";
    },
    async teardown(id, signal) {
      const { name } = await objectNames(opts.prefix, id);
      await opts.api.remove(`${kind.collection}/${name}`, signal);
      await opts.api.remove(`${kind.secrets}/${name}`, signal);
    },
  };
}
