// The Actions cache of one request (http/cache-routes.ts's CacheSite): on when the Worker has a
// CACHE_BUCKET binding, its index on the invocation's NATS connection, its bytes in that bucket,
// and each holder's job read from its assignment's record: the repository, and the scopes its
// forge tells. A holder's credentials end with its assignment, after a grace for post-job saves.
import { cacheKey, capability, type Holder } from "../cache/capability.ts";
import { r2Blobs } from "../cache/blobs.ts";
import { kvCacheIndex } from "../cache/kv-index.ts";
import { maintainCache } from "../cache/maintain.ts";
import { countCache } from "../cache/figures.ts";
import { scopesOf } from "../cache/scope.ts";
import { CacheRefusal, type CacheJob } from "../cache/service.ts";
import { forgejoSecret } from "../cache/capability.ts";
import type { Invocation } from "../domain/context.ts";
import type { RunnerCache } from "../domain/backend.ts";
import { recordsBucket } from "../nats/names.ts";
import type { AssignmentRecord } from "../state/record.ts";
import { incarnationOf } from "../state/records.ts";
import { bindBucket } from "../state/kv.ts";
import type { CacheSite } from "../cache/site.ts";

/** After its job ends, a holder may still save (a post-job step) this long. */
export const END_GRACE_MS = 10 * 60_000;

const keys = new Map<string, Promise<Uint8Array>>();
/** The cache's key, derived once per isolate and signing key. */
const keyOf = (signingKey: string) => {
  let k = keys.get(signingKey);
  if (!k) keys.set(signingKey, (k = cacheKey(signingKey)));
  return k;
};

/** `defer`: where work after the answer goes (the request's waitUntil). */
export async function cacheSiteOf(
  d: Invocation,
  env: Record<string, unknown>,
  defer: (work: Promise<unknown>) => void = (w) => void w.catch(() => undefined),
): Promise<CacheSite | undefined> {
  const bucket = env.CACHE_BUCKET as R2Bucket | undefined;
  if (!d.config.cache.enabled || !bucket) return undefined;
  const key = await keyOf(d.config.claimSigningKey);
  const bucketName = recordsBucket(d.config);
  return {
    key,
    publicUrl: d.config.publicUrl,
    now: d.now,
    open: (fn) =>
      d.withState(async (_state, handle) =>
        fn({ index: kvCacheIndex(handle, await bindBucket(handle, bucketName), bucketName), blobs: r2Blobs(bucket), limits: d.config.cache, now: d.now }),
      ),
    job: (holder, signed) => d.withState((state) => jobOf((id) => state.records.get(id), holder, d.now(), signed?.isolationKey)),
    secret: (holder) => forgejoSecret(key, holder),
    log: (e) => d.sink.event({ ...e, backend: undefined }),
    count: (repo, c) => defer(d.withState(async (_state, handle) => countCache(await bindBucket(handle, bucketName), repo, c))),
  };
}

/**
 * The job a holder runs, from its record, or why it runs none. Gitea hands a runner the oldest job
 * it can take, which need not be its own: the claim (in_progress) names the one it took, so a
 * Gitea holder is served only once claimed, with the repository and branch of the job it runs.
 * A Forgejo runner is bound to its job (one-job --handle) before it starts.
 */
export async function jobOf(read: (id: string) => Promise<AssignmentRecord | null>, holder: Holder, now: number, isolationKey?: string): Promise<CacheJob> {
  const record = await read(holder.assignment);
  if (!record || incarnationOf(record) !== holder.incarnation) throw new CacheRefusal(403, "scope", "cache read denied: this runner's job is unknown");
  const ended = record.completedAt ?? record.terminatedAt;
  if (ended !== undefined && now - Date.parse(ended) > END_GRACE_MS) throw new CacheRefusal(403, "scope", "cache read denied: this runner's job has ended");
  const forgejo = isolationKey !== undefined;
  // Not claimed yet (its in_progress is on its way): the client asks again once, 5 s later.
  if (!forgejo && record.claimedAt === undefined) throw new CacheRefusal(503, "scope", "this runner's job is not known yet; try again");
  const ran = !forgejo && record.took ? await read(record.took) : record;
  const repo = forgejo ? (record.bound?.repository ?? record.job?.repository) : ran?.job?.repository;
  if (!repo) throw new CacheRefusal(503, "scope", "this runner has no job yet; try again");
  const scopes = forgejo
    ? scopesOf({ forge: "forgejo", runId: record.job?.run ?? 0, isolationKey })
    : scopesOf({ forge: "gitea", runId: ran?.job?.run ?? 0, headBranch: ran?.job?.branch, defaultBranch: ran?.job?.defaultBranch });
  return { repo, scopes, holder: holder.assignment };
}

/** The cache's upkeep on the cron tick (cache/maintain.ts), within the tick's budget; a failure is logged and tried at the next. */
export async function tickCache(d: Invocation, env: Record<string, unknown>): Promise<void> {
  const site = await cacheSiteOf(d, env);
  if (!site) return;
  const until = d.now() + d.config.reconcileBudgetMs / 2;
  try {
    await site.open(async (deps) => {
      const upkeep = await maintainCache(deps, () => d.now() < until);
      for (const e of upkeep.evicted) d.sink.event({ event: "cache_evicted", assignment: "-", backend: undefined, repository: e.repo, bytes: e.bytes });
      await d.withState(async (_state, handle) => {
        const kv = await bindBucket(handle, recordsBucket(d.config));
        for (const { repo, entries, bytes } of upkeep.stored) {
          const evictions = upkeep.evicted.filter((e) => e.repo === repo).length;
          await countCache(kv, repo, { evictions, stored: { entries, bytes } });
        }
      });
    });
  } catch (err) {
    d.sink.error("the cache's upkeep failed; the next tick tries again", { reason: (err as Error).name });
  }
}

/**
 * What a runner is given of the cache: Gitea, a capability URL of its own (its cache.external_server,
 * ending in "/"); Forgejo, the Worker's origin naming the runner in the query (the proxy keeps the
 * query and drops the path) and the job's own cache.secret.
 */
export async function runnerCache(config: Invocation["config"], holder: Holder): Promise<RunnerCache> {
  const key = await keyOf(config.claimSigningKey);
  if (config.forge === "forgejo")
    return { url: `${config.publicUrl}/?gdr=${holder.assignment}~${holder.incarnation}`, secret: await forgejoSecret(key, holder) };
  return { url: `${config.publicUrl}/cache/${await capability(key, holder)}/` };
}
