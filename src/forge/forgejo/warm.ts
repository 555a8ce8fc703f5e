// Warm runners on Forgejo. A warm runner boots before its job exists, registered without a handle;
// its workload asks the dispatcher for one with its own claim token (GET /v1/assignments/{id}/handle)
// until it has it, then runs `forgejo-runner one-job --handle <h> --wait`. The poller gives a new job
// to an idle warm runner of the job's first pool instead of asking for a runner of its own (and a
// job that waits its turn, by moving it: move.ts): the warm runner's record is claimed for it by
// compare-and-set (two polls never give one runner two jobs), and the pool refills the position at once.
import type { AssignmentRequest } from "../../model/assignment.ts";
import type { BackendAccess, Basics, ForgeAccess, Settings, State, StoreAccess } from "../../domain/context.ts";
import { keepsWarm, maintainPools } from "../../pools/maintain.ts";
import { occupantOf } from "../../pools/warm-plan.ts";
import type { AssignmentRecord } from "../../state/records.ts";
import { claim } from "../../state/transitions.ts";
import { hasLimits, shareRules } from "../../quotas/config.ts";
import { releaseQuota, takeQuota } from "../../quotas/limits.ts";
import type { ForgejoJob } from "./client.ts";
import type { ForgejoConfig } from "./config.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "handles" | "quotas" | "records" | "warm">;

export interface WarmBinder {
  /**
   * Gives a new `job` to an idle warm runner of its first pool: that runner's assignment id, or
   * undefined when none is idle or the job's handle is bound to another runner already (by another
   * poller: the caller's own binding finds which). The handle is bound to the runner before its
   * record is claimed, so that of two pollers only one gives the job a runner; one whose record was
   * taken meanwhile passes the handle on to the next candidate, or back to the job's own runner.
   */
  bind(job: ForgejoJob, request: AssignmentRequest): Promise<string | undefined>;
  /** The idle warm runners of `pool` not handed out yet this poll, oldest first: whoever gives one away shifts it. */
  idle(pool: string): Promise<string[]>;
}

/** What a warm runner is given: a job attempt, counted to its repository. */
export type Bound = NonNullable<AssignmentRecord["bound"]>;

/** Idle warm runners of each pool, oldest first, read once per poll and handed out one by one. */
export function createWarmBinder(d: Deps): WarmBinder {
  let idle: Promise<Map<string, string[]>> | undefined;
  const read = (state: Stores) =>
    (idle ??= (async () => {
      const all = await state.warm.list();
      const records = await state.records.getMany([...all.values()].flat().map((s) => s.id));
      const byPool = new Map<string, string[]>();
      const now = d.now();
      const place = forgejoPlace(d.config.forgejo!);
      for (const [pool, slots] of all) {
        const ready = slots.filter((s) => {
          const r = records.get(s.id)?.value;
          const plan = r && { state: r.state, receivedAt: Date.parse(r.receivedAt), ...(r.readyAt ? { readyAt: Date.parse(r.readyAt) } : {}) };
          // Registered at another Forgejo or scope (GITEA_URL or GITEA_SCOPE changed, or before the place was kept): never given a job here.
          return (
            r?.runner !== undefined &&
            r.runner.place === place &&
            occupantOf(plan, { index: s.index, id: s.id, since: Date.parse(s.since), revision: s.revision }, now) === "idle"
          );
        });
        byPool.set(
          pool,
          ready.sort((a, b) => a.since.localeCompare(b.since)).map((s) => s.id),
        );
      }
      return byPool;
    })());
  const listOf = async (state: Stores, pool: string) => {
    const byPool = await read(state);
    if (!byPool.has(pool)) byPool.set(pool, []);
    return byPool.get(pool)!;
  };

  return {
    idle: (pool) => d.withState((state) => listOf(state, pool)),
    async bind(job, request) {
      const pool = d.config.pools.find((p) => p.name === request.pools?.[0]);
      if (!pool || !keepsWarm(pool) || !job.handle) return undefined;
      return d.withState(async (state) => {
        const candidates = await listOf(state, pool.name);
        const repository = request.job!.repository;
        // QUOTAS: the runner takes the job's owner's and repository's places, as its own runner
        // would; at a limit the job is published instead, and waits its turn there (quota_wait).
        const ledger = quotaLedgerOf(d, state);
        const rules = shareRules(d.config.quotas);
        let tried: string | undefined;
        while (candidates.length) {
          const id = candidates.shift()!;
          if (ledger && (await takeQuota(ledger, rules, id, repository)) === "refused") {
            candidates.unshift(id);
            break;
          }
          const giveBack = () => (ledger ? releaseQuota(ledger, id, repository, rules) : Promise.resolve());
          if ((await state.handles.bind(job.handle!, id, tried)) !== id) {
            // Another poll bound the job first: this runner took nothing, and stays for the next job.
            candidates.unshift(id);
            await giveBack();
            return undefined;
          }
          tried = id;
          const bound = { job: job.id, attempt: job.attempt ?? 1, handle: job.handle!, repository, at: new Date(d.now()).toISOString() };
          if (await claimWarm(d, state, id, bound, pool.name)) return id;
          await giveBack();
        }
        if (tried) await state.handles.bind(job.handle!, request.id, tried);
        return undefined;
      });
    },
  };
}

/**
 * Claims warm runner `id` for `bound`, by compare-and-set from up and idle: true when this call
 * did (or an earlier call of the same binding did). Its pool refills the position at once.
 */
export async function claimWarm(
  d: Deps,
  state: Stores,
  id: string,
  bound: Bound,
  pool: string,
  reason = `bound to job ${bound.job} attempt ${bound.attempt}`,
): Promise<boolean> {
  const { record: r } = await claim(state.records, id, { at: bound.at, bound, when: (r) => r.state === "backend_ready" && r.warm === true && !r.bound });
  if (!r?.bound || r.bound.handle !== bound.handle || r.bound.at !== bound.at) return false;
  d.sink.event({ event: "warm_took_job", assignment: id, backend: r.backend, pool, reason });
  // Its position is free now: the pool asks for a replacement at once, not at the next tick.
  await maintainPools(d, state, [pool], new Set([id])).catch((err) => d.sink.error("refilling a warm pool failed", { reason: (err as Error).message }));
  return true;
}

/** The QUOTAS ledger a warm runner's places are taken in: none without limits that apply (or FAIR_SHARE off). */
export function quotaLedgerOf(d: Deps, state: Stores) {
  return d.config.fairShare && hasLimits(d.config.quotas) ? state.quotas : undefined;
}

/** Gives back the QUOTAS places taken under warm runner `id` for a job of `repository`, where a ledger is kept. */
export async function releaseWarmPlaces(d: Deps, id: string, repository: string | undefined): Promise<void> {
  if (!d.config.fairShare || !hasLimits(d.config.quotas)) return;
  await d.withState((state) => releaseQuota(state.quotas, id, repository, shareRules(d.config.quotas)));
}

/** Where a Forgejo runner is registered: its URL and scope. A warm runner is given jobs of that place only. */
export function forgejoPlace(f: Pick<ForgejoConfig, "url" | "scope">): string {
  return `${f.url} ${JSON.stringify(f.scope)}`;
}
