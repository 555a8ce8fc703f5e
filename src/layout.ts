// The JetStream layout the dispatcher needs: created or updated by `npm run provision`,
// inspected (never created) by the Worker's /healthz.
import { AckPolicy, DeliverPolicy, RetentionPolicy, StorageType, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { nanos } from "@nats-io/nats-core";
import { MAX_ASSIGNMENT_BYTES } from "./assignment.ts";
import type { BackendConfig, Config } from "./config.ts";
import { admissionBucket, assignmentSubject, consumerName, recordsBucket, streamSubjects, type Backend } from "./names.ts";
import type { NatsHandle } from "./nats/connection.ts";

export const MAX_DELIVER = 1000;
/** Redeliveries of one webhook, minutes apart, still publish one message. */
const DUPLICATE_WINDOW_MS = 60 * 60 * 1000;
/** Records outlive any assignment that could still be queued. */
export const RECORD_TTL_MS = 7 * 24 * 60 * 60 * 1000;

export type LayoutConfig = Pick<Config, "stream" | "subjectBase" | "ackWaitMs"> & { backends: Pick<BackendConfig, "backend" | "capacity">[] };

export function desiredConsumer(cfg: LayoutConfig, backend: Backend, capacity: number) {
  return {
    name: consumerName(backend),
    durable_name: consumerName(backend),
    filter_subject: assignmentSubject({ stream: cfg.stream, subjectBase: cfg.subjectBase }, backend),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(cfg.ackWaitMs),
    max_ack_pending: capacity,
    max_deliver: MAX_DELIVER,
  };
}

function bucketNames(cfg: LayoutConfig) {
  const names = { stream: cfg.stream, subjectBase: cfg.subjectBase };
  return { records: recordsBucket(names), admission: admissionBucket(names) };
}

/** Creates or updates the stream, one consumer per enabled backend and the KV buckets. Idempotent. */
export async function provision(handle: NatsHandle, cfg: LayoutConfig): Promise<string[]> {
  const jsm = await jetstreamManager(handle.nc);
  const done: string[] = [];
  const stream = {
    name: cfg.stream,
    subjects: streamSubjects({ stream: cfg.stream, subjectBase: cfg.subjectBase }),
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
    max_msg_size: MAX_ASSIGNMENT_BYTES * 2,
  };
  if (await exists(() => jsm.streams.info(cfg.stream))) {
    const { retention: _fixed, storage: _fixedToo, ...updatable } = stream;
    await jsm.streams.update(cfg.stream, updatable);
    done.push(`stream ${cfg.stream}: updated`);
  } else {
    await jsm.streams.add(stream);
    done.push(`stream ${cfg.stream}: created`);
  }
  for (const b of cfg.backends) {
    const want = desiredConsumer(cfg, b.backend, b.capacity);
    if (await exists(() => jsm.consumers.info(cfg.stream, want.name))) {
      const { name: _n, durable_name: _d, ack_policy: _a, deliver_policy: _p, ...updatable } = want;
      await jsm.consumers.update(cfg.stream, want.name, updatable);
      done.push(`consumer ${want.name}: updated`);
    } else {
      await jsm.consumers.add(cfg.stream, want);
      done.push(`consumer ${want.name}: created`);
    }
  }
  const kvm = new Kvm(handle.js);
  const buckets = bucketNames(cfg);
  await kvm.create(buckets.records, { history: 1, ttl: RECORD_TTL_MS, storage: StorageType.File, allow_direct: true });
  await kvm.create(buckets.admission, { history: 1, storage: StorageType.File, allow_direct: true });
  done.push(`buckets ${buckets.records}, ${buckets.admission}: ready`);
  return done;
}

export interface LayoutReport {
  ok: boolean;
  problems: string[];
  stream?: { name: string; messages: number };
  consumers: Record<string, { pending: number; ackPending: number; redelivered: number }>;
}

/** Inspects the layout and names precisely what is missing or differs from the configuration. */
export async function inspect(handle: NatsHandle, cfg: LayoutConfig): Promise<LayoutReport> {
  const jsm: JetStreamManager = await jetstreamManager(handle.nc, { checkAPI: false });
  const problems: string[] = [];
  const report: LayoutReport = { ok: false, problems, consumers: {} };
  const fix = "run `npm run provision`";
  const stream = await maybe(() => jsm.streams.info(cfg.stream));
  if (!stream) problems.push(`stream ${cfg.stream} is missing (${fix})`);
  else {
    report.stream = { name: cfg.stream, messages: stream.state.messages };
    if (stream.config.retention !== RetentionPolicy.Workqueue) problems.push(`stream ${cfg.stream} must use work-queue retention`);
    for (const b of cfg.backends) {
      const want = desiredConsumer(cfg, b.backend, b.capacity);
      const info = await maybe(() => jsm.consumers.info(cfg.stream, want.name));
      if (!info) {
        problems.push(`consumer ${want.name} on stream ${cfg.stream} is missing (${fix})`);
        continue;
      }
      report.consumers[want.name] = { pending: info.num_pending, ackPending: info.num_ack_pending, redelivered: info.num_redelivered };
      for (const key of ["filter_subject", "max_ack_pending", "ack_wait", "max_deliver"] as const) {
        if (info.config[key] !== want[key]) problems.push(`consumer ${want.name}: ${key} is ${info.config[key]}, configuration wants ${want[key]} (${fix})`);
      }
    }
  }
  for (const bucket of Object.values(bucketNames(cfg))) {
    if (!(await maybe(() => jsm.streams.info(`KV_${bucket}`)))) problems.push(`KV bucket ${bucket} is missing (${fix})`);
  }
  report.ok = problems.length === 0;
  return report;
}

async function maybe<T>(fn: () => Promise<T>): Promise<T | undefined> {
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
  const e = err as { code?: number; api_error?: { code?: number }; message?: string; name?: string };
  return e?.api_error?.code === 404 || /not found/i.test(e?.message ?? "");
}
