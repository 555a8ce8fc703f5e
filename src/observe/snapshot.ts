// What the dispatcher is doing right now, per backend, at a fixed cost: the stream, each
// consumer, each backend's slots and registrations, and the records of the slot holders. Never a
// read of every record: the requests depend on the number of backends and on capacity (1024 slot
// holders per batch read), not on the number of assignments. Feeds /metrics and /status.
import { jetstreamManager } from "@nats-io/jetstream";
import type { Basics, ForgeAccess, Settings, StoreAccess } from "../domain/context.ts";
import { consumerName, recordsBucket, type Backend } from "../nats/names.ts";
import { readCacheFigures, type CacheFigures } from "../cache/figures.ts";
import type { AssignmentRecord } from "../state/records.ts";
import type { RerunState } from "../state/reruns.ts";
import { atQuotaLimit, ownerRows, type OwnerSnapshot } from "./owners.ts";
import { poolSnapshots, type PoolSnapshot } from "./pools.ts";
import { driverModule } from "../backends/drivers.ts";
import type { DriverFigures, Paid } from "../state/driver-figures.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics &
  StoreAccess &
  ForgeAccess &
  Settings<"backends" | "fairShare" | "pools" | "quotas" | "statusTopOwners" | "stream" | "subjectBase" | "cache">;

/** One backend's figures; the states come from the records of the slot holders. */
export interface BackendSnapshot {
  backend: Backend;
  capacity: number;
  slotsInUse: number;
  registering: number;
  /** Never delivered yet: state `received`. */
  queued: number;
  ackPending: number;
  redelivered: number;
  /**
   * Delivered and not acknowledged, without a slot: waiting for capacity (or being looked at right
   * now); with FAIR_SHARE=on, and the jobs in the wait set, waiting their turn (or a QUOTAS limit).
   */
  waitingForCapacity: number;
  pendingAtBackend: number;
  readyForClaim: number;
  running: number;
  /** In the wait set, held back by a QUOTAS limit of their owner or repository (quota_wait). */
  waitingForQuota: number;
  /** Deliveries so far, redeliveries included (JetStream's own count). */
  delivered: number;
}

export interface Snapshot {
  stream: { messages: number; published: number; acked: number };
  backends: BackendSnapshot[];
  /** Per runner pool (RUNNER_POOLS); empty without the Gitea integration. */
  pools: PoolSnapshot[];
  /** The busiest owners (STATUS_TOP_OWNERS), then `other`: runners held and jobs waiting. */
  owners: OwnerSnapshot[];
  /** FORGE=forgejo: how the poller fares (absent with Gitea). */
  forgePoll?: { failuresTotal: number; failing: boolean };
  /** Backends of a cloud driver (one with a sweep): what it counted (state/driver-figures.ts). */
  cloud: CloudSnapshot[];
  /** Runners whose machine was taken back, per pool, before and after their claim. */
  interruptions?: { pool: string; before: number; after: number }[];
  /** The Actions cache, per repository (cache/figures.ts): absent while the cache is off. */
  cache?: { repository: string; figures: CacheFigures }[];
  /** Jobs lost with an interrupted runner, by where their rerun stands; those a person must rerun, with their run's link. */
  reruns?: { states: Record<RerunState, number>; byHand: { id: string; repository: string; run: number; link?: string; reason?: string }[] };
}

export interface CloudSnapshot {
  backend: Backend;
  /** Its driver: the status page says servers and the project for hetzner, instances and the account for ec2. */
  driver: string;
  full: boolean;
  fullTotal: number;
  swept: number;
  /** The API's rate budget at the last sweep, when it sent one. */
  rate?: { limit: number; remaining: number };
  /** Paid time of its deleted servers, by pool (driver-figures.ts Paid): a driver that counts none has none. */
  paid?: ({ pool: string } & Paid)[];
}

export async function takeSnapshot(d: Deps): Promise<Snapshot> {
  return d.withState(async (state, handle) => {
    const jsm = await jetstreamManager(handle.nc, { checkAPI: false });
    const held: AssignmentRecord[] = [];
    const waiting = new Map<string, number>();
    const cloud = d.config.backends.filter((b) => driverModule(b.driver).figures).map((b) => b.backend);
    const [stream, counted, histograms, forgeHealth, figures, interrupted, rerunList, cacheFigures] = await Promise.all([
      jsm.streams.info(d.config.stream),
      Promise.all(
        d.config.backends.map(async ({ backend, capacity }) => {
          const [consumer, slots, turns] = await Promise.all([
            jsm.consumers.info(d.config.stream, consumerName(backend)),
            state.admission.snapshot(backend),
            // One more request, with fair share only: the wait set's count per repository.
            d.config.fairShare ? state.waiting.counts(backend) : new Map<string, number>(),
          ]);
          const records = await state.records.getMany(slots.holders);
          for (const r of records.values()) held.push(r.value);
          for (const [repository, n] of turns) waiting.set(repository, (waiting.get(repository) ?? 0) + n);
          const inState = (s: string) => [...records.values()].filter((r) => r.value.state === s).length;
          const pendingAtBackend = inState("backend_pending") + inState("capacity_wait") + inState("received");
          const readyForClaim = inState("backend_ready");
          // Without the wait set's jobs, added below.
          const figures: Omit<BackendSnapshot, "waitingForQuota"> = {
            backend,
            capacity,
            slotsInUse: slots.holders.length,
            // A reservation outlives its registration (a lagging replica must not register twice):
            // under way are those whose record has no runner yet.
            registering: slots.registering.filter((id) => !records.get(id)?.value.runner).length,
            queued: consumer.num_pending,
            ackPending: consumer.num_ack_pending,
            redelivered: consumer.num_redelivered,
            // A slot holder not yet claimed still has its message out; every other one out is waiting.
            // With fair share those are the wait set's, counted below: their messages are held.
            waitingForCapacity: d.config.fairShare ? 0 : Math.max(0, consumer.num_ack_pending - pendingAtBackend - readyForClaim),
            pendingAtBackend,
            readyForClaim,
            running: inState("claimed"),
            delivered: consumer.delivered.consumer_seq,
          };
          return { figures, turns };
        }),
      ),
      d.config.pools.length ? state.startups.read(d.config.pools.map((p) => p.name)) : new Map(),
      d.forge?.polled ? state.forgeHealth.get() : null,
      cloud.length ? state.driverFigures.read(cloud) : new Map<string, DriverFigures>(),
      cloud.length ? state.reruns.counts() : new Map<string, { before: number; after: number }>(),
      cloud.length ? state.reruns.list() : [],
      d.config.cache.enabled ? readCacheFigures(handle, recordsBucket(d.config)) : undefined,
    ]);
    const states: Record<RerunState, number> = { waiting: 0, asked: 0, by_hand: 0, refused: 0, settled: 0 };
    for (const e of rerunList) states[e.value.state]++;
    const byHand = rerunList
      .filter((e) => e.value.state === "by_hand" || e.value.state === "refused")
      .map(({ value: e }) => ({
        id: e.id,
        repository: e.repository,
        run: e.run,
        ...(d.forge?.runLink ? { link: d.forge.runLink(e.repository, e.run) } : {}),
        ...(e.reason ? { reason: e.reason } : {}),
      }));
    // Which jobs in the wait set a QUOTAS limit holds back depends on every backend's holders;
    // the others wait for capacity, as the delivered ones without a slot do.
    const limited = atQuotaLimit(held, d.config.quotas);
    const backends = counted.map(({ figures, turns }): BackendSnapshot => {
      let quota = 0;
      let capacity = 0;
      for (const [repository, n] of turns) {
        if (limited(repository)) quota += n;
        else capacity += n;
      }
      return { ...figures, waitingForCapacity: figures.waitingForCapacity + capacity, waitingForQuota: quota };
    });
    const { messages, last_seq } = stream.state;
    // A work queue removes a message once it is acknowledged (or termed).
    return {
      stream: { messages, published: last_seq, acked: last_seq - messages },
      backends,
      pools: poolSnapshots(d.config.pools, held, histograms, d.now()),
      owners: ownerRows(held, waiting, limited, d.config.statusTopOwners),
      ...(cloud.length ? { interruptions: [...interrupted].map(([pool, c]) => ({ pool, ...c })), reruns: { states, byHand } } : {}),
      cloud: cloud.map((backend) => {
        const f = figures.get(backend);
        return {
          backend,
          driver: d.config.backends.find((b) => b.backend === backend)?.driver ?? "",
          full: (f?.fullUntil ?? 0) > d.now(),
          fullTotal: f?.fullTotal ?? 0,
          swept: f?.swept ?? 0,
          ...(f?.rate ? { rate: { limit: f.rate.limit, remaining: f.rate.remaining } } : {}),
          ...(f?.paid ? { paid: Object.entries(f.paid).map(([pool, p]) => ({ pool, servers: p.servers, used: p.used, givenUp: p.givenUp })) } : {}),
        };
      }),
      ...(cacheFigures ? { cache: cacheFigures } : {}),
      ...(d.forge?.polled ? { forgePoll: { failuresTotal: forgeHealth?.failuresTotal ?? 0, failing: forgeHealth?.failingSince !== undefined } } : {}),
    };
  });
}
