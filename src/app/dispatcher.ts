// Wires configuration to domain modules. Entry points (HTTP, cron) build one Dispatcher per
// invocation and call its verbs; nothing here outlives the invocation but the isolate's record
// caches and turn slots (below), which hold no I/O object.
import { createRunnerBackend } from "./select-backend.ts";
import { tickDrivers } from "./driver-ticks.ts";
import type { RunnerBackend, RunnerRequest } from "../domain/backend.ts";
import type { Config } from "./config.ts";
import { claimToken, deriveKey } from "../model/crypto.ts";
import { runnerCache } from "./cache-site.ts";
import type { DriverDeps } from "../backends/driver-module.ts";
import { createBootstraps } from "../state/bootstraps.ts";
import { createDriverFigures, figureReader } from "../state/driver-figures.ts";
import { consoleSink, type EventSink } from "../model/events.ts";
import { recordsBucket, type Backend } from "../nats/names.ts";
import { closeNats, openNats, REQUEST_TIMEOUT_MS, withNats, type NatsHandle } from "../nats/connection.ts";
import { createGiteaClient, type GiteaClient, type TokenCache } from "../forge/gitea/client.ts";
import type { ForgejoClient } from "../forge/forgejo/client.ts";
import { createForge } from "./select-forge.ts";
import { createHandleIndex } from "../state/handles.ts";
import { createForgeHealthStore } from "../state/forge-health.ts";
import { createLimiter, withTimeout } from "../model/limit.ts";
import { REF_WRITE_RETRY_MS } from "../reconcile/process.ts";
import { reconcileBackend } from "../reconcile/run.ts";
import { retryTeardowns } from "../domain/teardown.ts";
import { tendPools } from "../pools/tend.ts";
import { createAdmission, type Placement } from "../state/admission.ts";
import { bindBucket, readAllUnder, readManyJson, type Versioned } from "../state/kv.ts";
import { createRecordStore, incarnationOf, placementOf, type AssignmentRecord } from "../state/records.ts";
import type { Assignment } from "../model/assignment.ts";
import { createRecordCache, type RecordCache } from "../state/record-cache.ts";
import { createTurnSlots, type TurnSlots } from "../state/turn-slots.ts";
import { createTeardownList } from "../state/teardowns.ts";
import { askReruns } from "../domain/reruns.ts";
import { createRerunList } from "../state/reruns.ts";
import { createWarmSlots } from "../state/warm-slots.ts";
import { createStartupTimes } from "../state/startup-times.ts";
import { createWaitingSeen, rememberWaiting, type WaitingSeen } from "../state/waiting-seen.ts";
import { createWarmLook, type WarmLook } from "../state/warm-look.ts";
import { createWaitSet } from "../state/wait-set.ts";
import { hasLimits, shareRules } from "../quotas/config.ts";
import { withQuotaRelease } from "../quotas/limits.ts";
import { createQuotaLedger, type Holders } from "../state/quota-ledger.ts";
import type { Dispatcher, State } from "../domain/context.ts";
import { processDeps } from "./process-deps.ts";
import { messageAt } from "../nats/pull.ts";

export { waitingCapacity } from "./process-deps.ts";

/**
 * No live pass can still be registering after this: it stops starting work at its budget, and the
 * work under way is a token fetch, a registration and a backend call (each bounded by
 * BACKEND_TIMEOUT_MS), then one NATS write, retried through a leader election for up to
 * REF_WRITE_RETRY_MS. A dead pass's reservation frees itself no later.
 */
export function registrationLeaseMs(config: Pick<Config, "reconcileBudgetMs" | "backendTimeoutMs">): number {
  return config.reconcileBudgetMs + 3 * config.backendTimeoutMs + REQUEST_TIMEOUT_MS + REF_WRITE_RETRY_MS;
}

/** Workers allow six open connections per invocation: one is NATS, four are backend calls. */
export const BACKEND_CONCURRENCY = 4;

export interface DispatcherDeps {
  config: Config;
  sink?: EventSink;
  now?: () => number;
  /** Runner backend per backend name; defaults to the `http` driver from the configuration. */
  runners?: Partial<Record<Backend, RunnerBackend>>;
  /** The fetch the drivers call their APIs with (tests: a network at a distance); by default the global one. */
  fetch?: typeof fetch;
  gitea?: GiteaClient;
  /** The Forgejo client (FORGE=forgejo); by default one on fetch. */
  forgejo?: ForgejoClient;
  /** Bound on each Gitea call when the caller has less time than BACKEND_TIMEOUT_MS (a gateway call). */
  giteaTimeoutMs?: number;
  /** Where the Gitea client keeps its registration token; by default its own (this invocation). */
  giteaTokens?: TokenCache;
  /**
   * One connection for the whole invocation (the request and the work it leaves to waitUntil),
   * opened on first use and drained by close(). Off: a connection per withState call.
   */
  shareConnection?: boolean;
  /** A connection kept by someone else (the gateway): used by withState, never closed here. */
  borrowed?: NatsHandle;
  /** Wraps the state stores of each connection: tests inject faults here. */
  decorateState?: (state: State) => State;
  /** What the records store keeps of the records it saw (record-cache.ts); by default the isolate's, per bucket. */
  recordCache?: RecordCache;
  /** What was seen of the wait set (waiting-seen.ts); by default the isolate's, per assignment stream. */
  waitingSeen?: WaitingSeen;
}

/** One `make()` per NATS deployment and `name` for the isolate's life: what outlives invocations, as the gateway does. */
function perDeployment<T>(kept: Map<string, T>, servers: readonly string[], name: string, make: () => T): T {
  const key = `${servers.join(",")} ${name}`;
  let value = kept.get(key);
  if (!value) kept.set(key, (value = make()));
  return value;
}
/** The isolate's record caches, one per records bucket. */
const recordCaches = new Map<string, RecordCache>();
/** The QUOTAS records this isolate last saw, per deployment (state/quota-ledger.ts). */
const quotaRecords = new Map<string, Map<string, Versioned<Holders>>>();
/** The isolate's turn slots (turn-slots.ts), one per assignment stream: a turn and its delivery are often two calls of the gateway. */
const turnSlots = new Map<string, TurnSlots<Placement>>();
/** What the isolate read and promised of its pools' idle warm runners (warm-look.ts), one per assignment stream. */
const warmLooks = new Map<string, WarmLook>();
/** What the isolate saw of the wait set (waiting-seen.ts), one per assignment stream: the passes of a burst share it. */
const waitingSeen = new Map<string, WaitingSeen>();

/** What starts a pass for jobs just published (PassOptions.newJobs): the http layer's triggers. */
const NEW_JOB_TRIGGERS = new Set(["publish", "webhook"]);

/** Messages per pull of an eager pass, and how many pulls it may take to reach a new one. */
export const EAGER_BATCH = 4;
export const EAGER_MAX_PULLS = 8;

export type { Dispatcher, ReconcileOptions, State } from "../domain/context.ts";

export function createDispatcher(deps: DispatcherDeps): Dispatcher {
  const { config } = deps;
  const sink = deps.sink ?? consoleSink;
  const now = deps.now ?? Date.now;
  const limit = createLimiter(BACKEND_CONCURRENCY);
  const gitea = config.gitea
    ? (deps.gitea ?? createGiteaClient(config.gitea, Math.min(config.backendTimeoutMs, deps.giteaTimeoutMs ?? Infinity), undefined, deps.giteaTokens))
    : undefined;
  const forge = createForge(config, gitea, now, deps.forgejo, deps.giteaTimeoutMs, sink);
  const sealKeys = {
    current: deriveKey(config.claimSigningKey, "bootstrap"),
    previous: config.previous.claimSigningKey ? deriveKey(config.previous.claimSigningKey, "bootstrap") : Promise.resolve(undefined),
  };
  const runners = new Map<Backend, RunnerBackend>();
  // Drivers that keep notes between passes (hetzner) use the invocation's stores, on its connection.
  const withStores: DriverDeps["withStores"] = (fn) =>
    dispatcher.withState((s) =>
      fn({ kv: s.driverKv, readMany: s.driverRead, readUnder: s.driverReadUnder, bootstraps: s.bootstraps, figures: s.driverFigures }),
    );
  for (const b of config.backends) runners.set(b.backend, deps.runners?.[b.backend] ?? createRunnerBackend(config, b, deps.fetch, { now, withStores }));

  const poolCaps = new Map(config.pools.flatMap((p) => (p.maxRunners === undefined ? [] : [[p.name, p.maxRunners] as const])));
  const openState = async (handle: NatsHandle): Promise<State> => {
    const names = { stream: config.stream, subjectBase: config.subjectBase };
    const [recordsKv, leaderKv] = await Promise.all([bindBucket(handle, recordsBucket(names)), bindBucket(handle, recordsBucket(names), false)]);
    const waiting = rememberWaiting(
      createWaitSet(handle, names),
      deps.waitingSeen ?? perDeployment(waitingSeen, config.natsServers, config.stream, () => createWaitingSeen()),
      now,
    );
    const anyWaiting = config.fairShare ? (backend: Backend) => waiting.any(backend) : undefined;
    const state: State = {
      records: createRecordStore(
        recordsKv,
        now,
        (keys) => readManyJson(handle, recordsBucket(names), keys),
        leaderKv,
        deps.recordCache ?? perDeployment(recordCaches, config.natsServers, recordsBucket(names), () => createRecordCache()),
      ),
      admission: createAdmission(handle, {
        names,
        capacity: config.capacity,
        poolCaps,
        leaseTtlMs: config.leaseTtlMs,
        registrationLeaseMs: registrationLeaseMs(config),
        anyWaiting,
        turnSlots: perDeployment(turnSlots, config.natsServers, config.stream, () => createTurnSlots<Placement>()),
      }),
      quotas: createQuotaLedger(
        recordsKv,
        (keys) => readManyJson(handle, recordsBucket(names), keys),
        config.leaseTtlMs,
        now,
        perDeployment(quotaRecords, config.natsServers, recordsBucket(names), () => new Map<string, Versioned<Holders>>()),
      ),
      teardowns: createTeardownList(handle, recordsKv, recordsBucket(names)),
      reruns: createRerunList(handle, recordsKv, recordsBucket(names)),
      warm: createWarmSlots(handle, recordsKv, recordsBucket(names), now),
      warmLook: perDeployment(warmLooks, config.natsServers, config.stream, () => createWarmLook()),
      startups: createStartupTimes(handle, recordsKv, recordsBucket(names)),
      waiting,
      handles: createHandleIndex(recordsKv),
      forgeHealth: createForgeHealthStore(recordsKv),
      bootstraps: createBootstraps(recordsKv, await sealKeys.current, now, await sealKeys.previous),
      driverKv: recordsKv,
      driverRead: (keys) => readManyJson(handle, recordsBucket(names), keys),
      driverReadUnder: (prefix) => readAllUnder(handle, recordsBucket(names), prefix),
      driverFigures: createDriverFigures(recordsKv, figureReader(handle, recordsBucket(names))),
    };
    if (hasLimits(config.quotas)) state.admission = withQuotaRelease(state.admission, state.quotas, shareRules(config.quotas));
    return deps.decorateState ? deps.decorateState(state) : state;
  };

  let shared: Promise<{ handle: NatsHandle; state: State }> | undefined;
  // A runner that replaces one interrupted before its claim, or runs a job rerun after one was
  // interrupted after it (the previous attempt's rerun entry): on-demand where the pool falls back.
  const afterInterruption = async (assignment: Assignment, record: AssignmentRecord): Promise<boolean> => {
    if (record.interrupted) return true;
    // Whatever the forge's attempt numbers say: a rerun the dispatcher asked for is noted under its assignment.
    if (!assignment.job || assignment.job.attempt < 2 || !forge?.reruns) return false;
    return (await dispatcher.withState((s) => s.reruns.rerunOf(assignment.id))) !== null;
  };
  const dispatcher: Dispatcher = {
    config,
    sink,
    now,
    runnersFor(backend) {
      const r = runners.get(backend);
      if (!r) throw new Error(`backend ${backend} is disabled`);
      return r;
    },
    async withState(fn) {
      if (deps.borrowed) {
        const handle = deps.borrowed;
        shared ??= openState(handle).then((state) => ({ handle, state }));
        return fn((await shared).state, handle);
      }
      if (!deps.shareConnection) return withNats(config, async (handle) => fn(await openState(handle), handle));
      shared ??= openNats(config).then(async (handle) => ({ handle, state: await openState(handle) }));
      const { handle, state } = await shared;
      return fn(state, handle);
    },
    withFreshState: (fn) => withNats(config, async (handle) => fn(await openState(handle))),
    async close() {
      const session = await shared?.catch(() => undefined);
      shared = undefined;
      if (session && !deps.borrowed) await closeNats(session.handle.nc);
    },
    forge,
    async runnerRequest(assignment, record, reserved, placement = placementOf(record)) {
      const base = `${config.publicUrl}/v1/assignments/${encodeURIComponent(assignment.id)}`;
      const pool = config.pools.find((p) => p.name === placement.pool);
      const market = pool?.market === "spot" && pool.spotFallback === "on-demand" && (await afterInterruption(assignment, record)) ? "on-demand" : pool?.market;
      const cache = config.cache.enabled ? await runnerCache(config, { assignment: assignment.id, incarnation: incarnationOf(record) }) : undefined;
      const request: RunnerRequest = {
        assignment,
        ...(cache ? { cache } : {}),
        claimToken: await claimToken(config.claimSigningKey, assignment.id, incarnationOf(record)),
        claimUrl: `${base}/claim`,
        completeUrl: `${base}/complete`,
        bootstrapUrl: `${base}/bootstrap`,
        interruptUrl: `${base}/interrupt`,
        ...(pool
          ? {
              pool: {
                name: pool.name,
                ...(pool.template ? { template: pool.template } : {}),
                ...(pool.candidates ? { candidates: pool.candidates } : {}),
                ...(pool.reuse ? { reuse: pool.reuse, warmUntil: pool.warmUntil } : {}),
                ...(market ? { market } : {}),
                ...(pool.spotFallback ? { spotFallback: pool.spotFallback } : {}),
              },
            }
          : {}),
      };
      if (!forge) return { request };
      // A runner of a pool has that pool's labels: a spilled job's are not its first pool's.
      const outcome = await forge.identity(assignment, pool?.labels ?? assignment.labels, record, reserved, pool);
      if (outcome === "busy") return "busy";
      const { identity, ref } = outcome;
      const fields = forge.runnerFields(identity, { claimToken: request.claimToken, completeUrl: request.completeUrl, handleUrl: `${base}/handle`, cache });
      return { request: { ...request, ...fields }, ...(ref ? { ref } : {}) };
    },
    callBackend: (fn) => limit(() => withTimeout(config.backendTimeoutMs, fn)),
    async tick(trigger) {
      const started = now();
      await forge?.tick(dispatcher);
      await retryTeardowns(dispatcher).catch((err) => sink.error("teardown retries failed", { reason: (err as Error).name }));
      if (forge) await askReruns(dispatcher).catch((err) => sink.error("reruns failed", { reason: (err as Error).name }));
      await tickDrivers(dispatcher, config, now);
      if (config.pools.length) await tendPools(dispatcher);
      return dispatcher.reconcile(trigger, Math.max(0, config.reconcileBudgetMs - (now() - started)), { holdClaims: true });
    },
    reconcile(trigger, budgetMs, { only, firstPullWaitMs, holdClaims, eager } = {}) {
      const deadline = now() + budgetMs;
      const targets = config.backends.filter((b) => !only || only.includes(b.backend));
      if (!targets.length) return Promise.resolve([]);
      return dispatcher.withState((state, handle) =>
        Promise.all(
          targets.map((b) =>
            reconcileBackend(
              handle,
              processDeps(dispatcher, state, b.backend, (subject, data) => messageAt(handle.nc, subject, data)),
              {
                stream: config.stream,
                batchSize: eager ? Math.min(b.batchSize, EAGER_BATCH) : b.batchSize,
                ...(eager ? { untilNew: { maxPulls: EAGER_MAX_PULLS } } : {}),
                newJobs: NEW_JOB_TRIGGERS.has(trigger),
                deadline,
                trigger,
                ...(firstPullWaitMs ? { firstPullWaitMs } : {}),
                holdClaims: holdClaims ?? false,
              },
            ),
          ),
        ),
      );
    },
  };
  return dispatcher;
}
