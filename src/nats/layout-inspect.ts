// What /healthz reports of the JetStream layout: what is missing, what drifted from the
// configuration, and, on a cluster, replicas without a leader or falling behind. Each problem
// says how to fix it. Never creates anything.
import { RetentionPolicy, jetstreamManager, type ClusterInfo, type JetStreamManager } from "@nats-io/jetstream";
import { admissionStreams, bucketNames, desiredConsumer, leftBehind, maybe, waitStreamConfig, type LayoutConfig } from "./layout.ts";
import type { NatsHandle } from "./connection.ts";
import { poolSlotsStream, slotsStream, type Backend } from "./names.ts";

export interface LayoutReport {
  ok: boolean;
  problems: string[];
  stream?: { name: string; messages: number; replicas: number; leader?: string };
  consumers: Record<string, { pending: number; ackPending: number; redelivered: number }>;
}

/** The fix for a layout that differs: provisioning from the configuration this Worker runs with. */
export const PROVISION = "run `npm run provision` with the Worker's wrangler.jsonc, adding `-- --env NAME` for a wrangler environment";
/** A replica this many messages behind its leader is lagging, not just busy. */
export const LAG_LIMIT = 1_000;

export async function inspect(handle: NatsHandle, cfg: LayoutConfig): Promise<LayoutReport> {
  const jsm: JetStreamManager = await jetstreamManager(handle.nc, { checkAPI: false });
  const problems: string[] = [];
  const report: LayoutReport = { ok: false, problems, consumers: {} };
  const stream = await maybe(() => jsm.streams.info(cfg.stream));
  if (!stream) problems.push(`stream ${cfg.stream} is missing (${PROVISION})`);
  else {
    report.stream = {
      name: cfg.stream,
      messages: stream.state.messages,
      replicas: stream.config.num_replicas,
      ...(stream.cluster?.leader ? { leader: stream.cluster.leader } : {}),
    };
    if (stream.config.retention !== RetentionPolicy.Workqueue) problems.push(`stream ${cfg.stream} must use work-queue retention`);
    problems.push(...replicaProblems(`stream ${cfg.stream}`, stream.config.num_replicas, stream.cluster, cfg.replicas));
    for (const b of cfg.backends) {
      const want = desiredConsumer(cfg, b.backend);
      const info = await maybe(() => jsm.consumers.info(cfg.stream, want.name));
      if (!info) {
        problems.push(`consumer ${want.name} on stream ${cfg.stream} is missing (CAPACITY_${b.backend.toUpperCase()} > 0: ${PROVISION})`);
        continue;
      }
      report.consumers[want.name] = { pending: info.num_pending, ackPending: info.num_ack_pending, redelivered: info.num_redelivered };
      for (const key of ["filter_subject", "max_ack_pending", "ack_wait", "max_deliver"] as const) {
        if (info.config[key] !== want[key])
          problems.push(
            `consumer ${want.name}: ${key} is ${info.config[key]}, configuration wants ${want[key]} (set by ${consumerVariables(cfg, b.backend)[key]}: ${PROVISION})`,
          );
      }
      // A consumer's 0 replicas means "as many as its stream".
      problems.push(...replicaProblems(`consumer ${want.name}`, info.config.num_replicas || stream.config.num_replicas, info.cluster, cfg.replicas));
    }
    problems.push(...(await leftBehind(jsm, cfg)));
  }
  for (const want of admissionStreams(cfg)) {
    const info = await maybe(() => jsm.streams.info(want.name));
    const by = admissionVariable(cfg, want.name);
    if (!info) problems.push(`stream ${want.name} is missing (${by ? `${by}: ` : ""}${PROVISION})`);
    else {
      // A slots stream's message limit is the backend's capacity: the one place it is enforced.
      if (info.config.max_msgs !== want.max_msgs)
        problems.push(`stream ${want.name} admits ${info.config.max_msgs} runners, configuration wants ${want.max_msgs} (set by ${by}: ${PROVISION})`);
      if (!info.config.allow_msg_ttl) problems.push(`stream ${want.name} does not allow message TTLs, so leases would never expire (${PROVISION})`);
      problems.push(...replicaProblems(`stream ${want.name}`, info.config.num_replicas, info.cluster, cfg.replicas));
    }
  }
  const waiting = waitStreamConfig(cfg);
  const info = await maybe(() => jsm.streams.info(waiting.name));
  if (!info) problems.push(`stream ${waiting.name} is missing (${PROVISION})`);
  else problems.push(...replicaProblems(`stream ${waiting.name}`, info.config.num_replicas, info.cluster, cfg.replicas));
  for (const bucket of Object.values(bucketNames(cfg))) {
    const info = await maybe(() => jsm.streams.info(`KV_${bucket}`));
    if (!info) problems.push(`KV bucket ${bucket} is missing (${PROVISION})`);
    else problems.push(...replicaProblems(`KV bucket ${bucket}`, info.config.num_replicas, info.cluster, cfg.replicas));
  }
  report.ok = problems.length === 0;
  return report;
}

/** The variables behind each consumer setting /healthz compares. */
function consumerVariables(cfg: LayoutConfig, backend: Backend): Record<"filter_subject" | "max_ack_pending" | "ack_wait" | "max_deliver", string> {
  const spans = new Set((cfg.pools ?? []).map((p) => p.backend)).size > 1;
  const capacity = spans ? cfg.backends.map((b) => `CAPACITY_${b.backend.toUpperCase()}`).join(", ") : `CAPACITY_${backend.toUpperCase()}`;
  return {
    filter_subject: "ASSIGNMENT_STREAM and ASSIGNMENT_SUBJECT_BASE",
    max_ack_pending: `${capacity}${spans ? " (RUNNER_POOLS span backends)" : ""} and FAIR_SHARE`,
    ack_wait: "ACK_WAIT_MS (in nanoseconds here)",
    max_deliver: "this release (an upgrade)",
  };
}

/** The variable that sizes an admission stream: a backend's capacity, or a pool's maxRunners. */
function admissionVariable(cfg: LayoutConfig, stream: string): string | undefined {
  const names = { stream: cfg.stream, subjectBase: cfg.subjectBase };
  const b = cfg.backends.find((x) => slotsStream(names, x.backend) === stream);
  if (b) return `CAPACITY_${b.backend.toUpperCase()}`;
  const i = (cfg.pools ?? []).findIndex((p) => poolSlotsStream(names, p.name) === stream);
  return i < 0 ? undefined : `RUNNER_POOLS[${i}]["maxRunners"] (pool ${JSON.stringify(cfg.pools![i]!.name)})`;
}

/** Replica count against the configuration, a missing leader, and replicas offline or behind. */
export function replicaProblems(what: string, replicas: number, cluster: ClusterInfo | undefined, wanted: number): string[] {
  const problems: string[] = [];
  if (replicas !== wanted) problems.push(`${what} has ${replicas} replicas, JETSTREAM_REPLICAS wants ${wanted} (${PROVISION})`);
  if (replicas > 1 && cluster && !cluster.leader) {
    problems.push(`${what} has no leader: fewer than a majority of its ${replicas} replicas are up (bring the stopped NATS servers back)`);
  }
  for (const peer of cluster?.replicas ?? []) {
    if (peer.offline) problems.push(`${what}: replica on ${peer.name} is offline (bring that NATS server back)`);
    else if (!peer.current || (peer.lag ?? 0) > LAG_LIMIT) {
      problems.push(
        `${what}: replica on ${peer.name} lags ${peer.lag ?? "?"} operations behind its leader (it catches up by itself; if it does not, check that server's disk and network)`,
      );
    }
  }
  return problems;
}
