// The JetStream layout the dispatcher needs: created or updated by `npm run provision`,
// inspected (never created) by the Worker's /healthz.
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  jetstreamManager,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { nanos } from "@nats-io/nats-core";
import { MAX_ASSIGNMENT_BYTES } from "../model/assignment.ts";
import {
  assignmentSubject,
  consumerName,
  legacyAdmissionBucket,
  poolSlotPrefix,
  poolSlotsStream,
  recordsBucket,
  registrationSubjects,
  registrationsStream,
  slotPrefix,
  slotsStream,
  streamSubjects,
  waitStream,
  type Backend,
} from "./names.ts";
import type { NatsHandle } from "./connection.ts";

export const MAX_DELIVER = 1000;
/** Redeliveries of one webhook, minutes apart, still publish one message. */
const DUPLICATE_WINDOW_MS = 60 * 60 * 1000;
/** Records outlive any assignment that could still be queued. */
export const RECORD_TTL_MS = 7 * 24 * 60 * 60 * 1000;

/** What the layout is made from: the parts of the configuration (app/config.ts) that name or size a stream. */
export interface LayoutConfig {
  stream: string;
  subjectBase: string;
  ackWaitMs: number;
  /** JETSTREAM_REPLICAS */
  replicas: number;
  /** FAIR_SHARE=on: the consumer's window is wider than the capacity (see consumerLimit). */
  fairShare?: boolean;
  backends: { backend: Backend; capacity: number }[];
  /** The runner pools; those with maxRunners get a slots stream. */
  pools?: { name: string; backend: Backend; maxRunners?: number | undefined }[];
}

/**
 * How many of a consumer's messages may be out at once. A message is out until its runner claims
 * it, and a job that spills from its backend's pools to another backend's waits in its first
 * backend's consumer: with pools on several backends, every backend's capacity together.
 *
 * With fair share, FAIR_SHARE_WINDOW more: admission is exact through the slots streams, so the
 * window bounds no runner. A job that finds no slot waits in the wait set with its message held
 * (nak'd for a long while, reconcile/give-turn.ts), out but unacked: the window is how many jobs
 * can wait their turn at once. Jobs past it stay in the stream, unseen, until some leave; they
 * come in stream order then.
 */
export function consumerLimit(cfg: LayoutConfig, backend: Backend): number {
  const own = cfg.backends.find((b) => b.backend === backend)?.capacity ?? 0;
  const spans = new Set((cfg.pools ?? []).map((p) => p.backend)).size > 1;
  const slots = spans ? cfg.backends.reduce((sum, b) => sum + b.capacity, 0) : own;
  return cfg.fairShare ? slots + FAIR_SHARE_WINDOW : slots;
}

/** Messages a fair-share consumer hands out beyond its slots: the jobs that may wait their turn at once. */
export const FAIR_SHARE_WINDOW = 10_000;

export function desiredConsumer(cfg: LayoutConfig, backend: Backend) {
  return {
    name: consumerName(backend),
    durable_name: consumerName(backend),
    filter_subject: assignmentSubject({ stream: cfg.stream, subjectBase: cfg.subjectBase }, backend),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(cfg.ackWaitMs),
    max_ack_pending: consumerLimit(cfg, backend),
    max_deliver: MAX_DELIVER,
    // As many as the stream: a consumer follows its stream when that changes its replicas, while
    // an explicit count above the stream's is refused until the stream has scaled up.
    num_replicas: 0,
  };
}

export function bucketNames(cfg: Pick<LayoutConfig, "stream" | "subjectBase">) {
  return { records: recordsBucket({ stream: cfg.stream, subjectBase: cfg.subjectBase }) };
}

/**
 * The admission streams (see state/admission.ts): per enabled backend, one holding at most
 * `capacity` slot leases, refusing the one past it; one for the registrations under way. Leases
 * expire by their own message TTL, which needs nats-server 2.11 or later.
 */
export function admissionStreams(cfg: LayoutConfig): (Partial<StreamConfig> & { name: string; max_msgs: number })[] {
  const names = { stream: cfg.stream, subjectBase: cfg.subjectBase };
  const leases = {
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    allow_msg_ttl: true,
    allow_direct: true,
    num_replicas: cfg.replicas,
  };
  return [
    ...cfg.backends.map((b) => ({ ...leases, name: slotsStream(names, b.backend), subjects: [`${slotPrefix(names, b.backend)}.*`], max_msgs: b.capacity })),
    ...(cfg.pools ?? []).flatMap((p) =>
      p.maxRunners === undefined
        ? []
        : [{ ...leases, name: poolSlotsStream(names, p.name), subjects: [`${poolSlotPrefix(names, p.name)}.*`], max_msgs: p.maxRunners }],
    ),
    // One word per id: a new one replaces the last.
    { ...leases, name: registrationsStream(names), subjects: registrationSubjects(names), max_msgs: -1, max_msgs_per_subject: 1 },
  ];
}

/**
 * The wait set (fair share, see state/wait-set.ts): kept until taken out, never discarded; a job
 * put in twice within the hour (a pass that died before its ack) is one entry.
 */
export function waitStreamConfig(cfg: LayoutConfig): Partial<StreamConfig> & { name: string } {
  const names = { stream: cfg.stream, subjectBase: cfg.subjectBase };
  return {
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    allow_direct: true,
    num_replicas: cfg.replicas,
    name: waitStream(names),
    subjects: [`${cfg.subjectBase}.waiting.*.*.*`],
    max_msgs: -1,
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
  };
}

/** What `provision` makes of `cfg`, one line each, without connecting (provision --dry-run). */
export function layoutPlan(cfg: LayoutConfig): string[] {
  const r = `R${cfg.replicas}`;
  return [
    `would provision: stream ${cfg.stream} (${r}, work queue, subjects ${streamSubjects({ stream: cfg.stream, subjectBase: cfg.subjectBase }).join(" ")})`,
    ...cfg.backends.map((b) => {
      const c = desiredConsumer(cfg, b.backend);
      return `would provision: consumer ${c.name} (max_ack_pending ${c.max_ack_pending}, ack_wait ${cfg.ackWaitMs} ms, max_deliver ${c.max_deliver})`;
    }),
    ...admissionStreams(cfg).map((s) => `would provision: stream ${s.name} (${r}, max_msgs ${s.max_msgs < 0 ? "unlimited" : s.max_msgs})`),
    `would provision: stream ${waitStreamConfig(cfg).name} (${r}, the wait set)`,
    `would provision: bucket ${bucketNames(cfg).records} (${r}, records kept ${RECORD_TTL_MS / 86_400_000} days)`,
  ];
}

/** JetStream cannot keep the asked-for replicas (a single server, or too few JetStream servers). */
export class ReplicasUnavailable extends Error {
  override readonly name = "ReplicasUnavailable";
}

/**
 * Creates or updates the stream, one consumer per enabled backend and the KV buckets, each with
 * `replicas` replicas; an existing layout changes its replica count in place, keeping its data.
 * Idempotent. Replicas the servers cannot give are refused before anything is touched.
 */
export async function provision(handle: NatsHandle, cfg: LayoutConfig): Promise<string[]> {
  // Replica changes go through the cluster's meta leader and the stream's new peers: slower than
  // the 5 s a request is given elsewhere.
  const jsm = await jetstreamManager(handle.nc, { timeout: PROVISION_TIMEOUT_MS });
  if (cfg.replicas > 1) await probeReplicas(jsm, cfg.replicas);
  const done: string[] = [];
  const stream = {
    name: cfg.stream,
    subjects: streamSubjects({ stream: cfg.stream, subjectBase: cfg.subjectBase }),
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
    max_msg_size: MAX_ASSIGNMENT_BYTES * 2,
    num_replicas: cfg.replicas,
  };
  const existing = await maybe(() => jsm.streams.info(cfg.stream));
  if (existing) {
    const { retention: _fixed, storage: _fixedToo, ...updatable } = stream;
    await jsm.streams.update(cfg.stream, updatable);
    done.push(`stream ${cfg.stream}: updated${replicaChange(existing.config.num_replicas, cfg.replicas)}`);
  } else {
    await jsm.streams.add(stream);
    done.push(`stream ${cfg.stream}: created (R${cfg.replicas})`);
  }
  for (const b of cfg.backends) {
    const want = desiredConsumer(cfg, b.backend);
    const had = await maybe(() => jsm.consumers.info(cfg.stream, want.name));
    if (had) {
      const { name: _n, durable_name: _d, ack_policy: _a, deliver_policy: _p, ...updatable } = want;
      await jsm.consumers.update(cfg.stream, want.name, updatable);
      done.push(`consumer ${want.name}: ${changes(had.config, want, ["filter_subject", "max_ack_pending", "ack_wait", "max_deliver"])}`);
    } else {
      await jsm.consumers.add(cfg.stream, want);
      done.push(`consumer ${want.name}: created`);
    }
  }
  for (const want of [...admissionStreams(cfg), waitStreamConfig(cfg)]) {
    const info = await maybe(() => jsm.streams.info(want.name));
    if (info) {
      await jsm.streams.update(want.name, { ...info.config, ...want });
      done.push(`stream ${want.name}: ${changes(info.config, want, ["max_msgs"])}${replicaChange(info.config.num_replicas, cfg.replicas)}`);
    } else {
      await jsm.streams.add(want);
      done.push(`stream ${want.name}: created (R${cfg.replicas})`);
    }
  }
  done.push(...(await leftBehind(jsm, cfg)));
  const legacy = legacyAdmissionBucket({ stream: cfg.stream, subjectBase: cfg.subjectBase });
  if (await exists(() => jsm.streams.info(`KV_${legacy}`)))
    done.push(`bucket ${legacy}: no longer used (admission is in streams now); delete it once no older Worker runs`);
  const kvm = new Kvm(handle.js);
  const buckets = bucketNames(cfg);
  const kvOptions = { history: 1, storage: StorageType.File, allow_direct: true, replicas: cfg.replicas };
  for (const [bucket, ttl] of [[buckets.records, RECORD_TTL_MS]] as const) {
    const info = await maybe(() => jsm.streams.info(`KV_${bucket}`));
    if (info && info.config.num_replicas !== cfg.replicas) {
      await jsm.streams.update(`KV_${bucket}`, { ...info.config, num_replicas: cfg.replicas });
      done.push(`bucket ${bucket}: updated${replicaChange(info.config.num_replicas, cfg.replicas)}`);
    } else if (!info) {
      await kvm.create(bucket, { ...kvOptions, ...(ttl ? { ttl } : {}) });
      done.push(`bucket ${bucket}: created (R${cfg.replicas})`);
    } else done.push(`bucket ${bucket}: ready`);
  }
  return done;
}

/**
 * Consumers of backends the configuration no longer names that still hold jobs: removed from
 * BACKENDS (or set to capacity 0) while jobs waited there, they would wait for ever unseen.
 */
export async function leftBehind(jsm: JetStreamManager, cfg: LayoutConfig): Promise<string[]> {
  const known = new Set(cfg.backends.map((b) => consumerName(b.backend)));
  const out: string[] = [];
  for await (const c of jsm.consumers.list(cfg.stream)) {
    if (known.has(c.name)) continue;
    const jobs = c.num_pending + c.num_ack_pending;
    if (jobs > 0)
      out.push(
        `consumer ${c.name} holds ${jobs} jobs of backend ${c.name}, which the configuration no longer names (BACKENDS, CAPACITY_*): name it again until they are done, or end them`,
      );
  }
  return out;
}

const PROVISION_TIMEOUT_MS = 30_000;

/** What an update changed, named at once: a capacity or window that differs from the last provision shows here. */
function changes<T extends object>(was: T, want: Partial<T>, keys: (keyof T)[]): string {
  const changed = keys.filter((k) => k in want && was[k] !== want[k]).map((k) => `${String(k)} ${String(was[k])} → ${String(want[k])}`);
  return changed.length ? `updated (${changed.join(", ")})` : "updated";
}

const replicaChange = (from: number, to: number) => (from === to ? "" : ` (R${from} → R${to})`);

/** JetStream's refusals by a limit (insufficient resources, storage or memory exceeded, too many streams): server/errors.json. */
const LIMIT_CODES = new Set([10023, 10047, 10028, 10027]);

/**
 * Asks JetStream for a throwaway stream with `replicas` replicas: the one way to know it can. On
 * file storage, as every stream of the layout is: an account may allow no memory at all (max_mem 0).
 */
async function probeReplicas(jsm: JetStreamManager, replicas: number): Promise<void> {
  const name = `GDR_PROBE_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  try {
    await jsm.streams.add({ name, subjects: [`_gdr_probe.${name}`], storage: StorageType.File, num_replicas: replicas, max_msgs: 1, max_bytes: 4096 });
  } catch (err) {
    if (!(err instanceof JetStreamApiError)) throw err;
    const said = err.apiError().description ?? err.message;
    // A limit of the account or the servers, not a lack of servers: say which setting refused.
    if (LIMIT_CODES.has(err.apiError().err_code ?? 0) || /insufficient|exceeded/i.test(said))
      throw new ReplicasUnavailable(
        `JETSTREAM_REPLICAS=${replicas}: the NATS account's or servers' JetStream limits refused a ${replicas}-replica file stream (${said}). ` +
          "Nothing was created or changed. Raise max_file (and max_streams) in the account's jetstream block, or max_file_store on each server (examples/nats-server.conf).",
      );
    throw new ReplicasUnavailable(
      `JETSTREAM_REPLICAS=${replicas} needs a NATS cluster with at least ${replicas} JetStream servers, and the server refused (${said}). ` +
        "Nothing was created or changed. Use JETSTREAM_REPLICAS=1 on a single server, or list every cluster node in NATS_URL.",
    );
  }
  await jsm.streams.delete(name).catch(() => undefined);
}
export async function maybe<T>(fn: () => Promise<T>): Promise<T | undefined> {
  try {
    return await fn();
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

async function exists(fn: () => Promise<unknown>): Promise<boolean> {
  return (await maybe(fn)) !== undefined;
}

function isNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.status === 404;
}
