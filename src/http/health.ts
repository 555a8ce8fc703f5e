// What /healthz tells a caller without credentials, kept per isolate for a few seconds: it is the
// one route that reaches NATS without a credential, so its cost must not follow the request rate.
import type { Config } from "../app/config.ts";
import { inspect } from "../nats/layout-inspect.ts";
import { NatsAuthRefused, natsHosts, withNats, type NatsHandle } from "../nats/connection.ts";
import { driverModule } from "../backends/drivers.ts";
import { placementOf } from "../backends/refused-field.ts";
import { recordsBucket } from "../nats/names.ts";
import { figuresKey, freshRefusals, type DriverFigures } from "../state/driver-figures.ts";
import { readManyJson } from "../state/kv.ts";
import { createForgejoClient } from "../forge/forgejo/client.ts";
import { forgejoVersion } from "../forge/forgejo/version.ts";
import { createGiteaClient } from "../forge/gitea/client.ts";
import { giteaRelease } from "../forge/gitea/release.ts";
import { consoleSink } from "../model/events.ts";

/** How long one answer serves every unauthenticated /healthz of an isolate. */
export const HEALTH_TTL_MS = 3_000;

export interface HealthAnswer {
  status: 200 | 503;
  body: Record<string, unknown>;
}

/**
 * One check at a time per configuration, its answer reused until `ttlMs` after it settled. Keyed
 * by the parsed configuration object (one per env and isolate), so nothing outlives it.
 */
export function createHealthCache(ttlMs = HEALTH_TTL_MS, now: () => number = Date.now) {
  const kept = new WeakMap<Config, { answer: Promise<HealthAnswer>; until: number }>();
  return function cached(config: Config, check: () => Promise<HealthAnswer>): Promise<HealthAnswer> {
    const entry = kept.get(config);
    if (entry && now() < entry.until) return entry.answer;
    const fresh = { answer: check(), until: Number.POSITIVE_INFINITY };
    kept.set(config, fresh);
    // In flight, every caller shares it; settled, it serves for ttlMs more.
    void fresh.answer.then(
      () => (fresh.until = now() + ttlMs),
      () => kept.get(config) === fresh && kept.delete(config),
    );
    return fresh.answer;
  };
}

export type HealthCache = ReturnType<typeof createHealthCache>;

/** What /healthz answers now: the layout's problems, and with `detailed` its counts (one connection). */
export async function checkHealth(config: Config, detailed: boolean): Promise<HealthAnswer> {
  let report;
  let refusals: string[];
  try {
    ({ report, refusals } = await withNats(config, async (handle) => ({ report: await inspect(handle, config), refusals: await refusalsOf(handle, config) })));
  } catch (err) {
    return {
      status: 503,
      body: {
        ok: false,
        nats: { ok: false },
        // A refusal of the credentials says which variables hold them; anything else is the URL's.
        problems: [
          err instanceof NatsAuthRefused
            ? `${(err as Error).message} (NATS at ${natsHosts(config.natsServers)})`
            : `NATS unreachable at ${natsHosts(config.natsServers)}: ${(err as Error).name}`,
        ],
      },
    };
  }
  const forge = await forgeCheck(config);
  const problems = [...report.problems, ...refusals, ...(forge?.problem ? [forge.problem] : [])];
  const ok = report.ok && !refusals.length && !forge?.problem;
  const forgeBody = forge
    ? {
        forge: {
          kind: config.forge,
          ...(forge.version ? { version: forge.version } : {}),
          ...(forge.servedAs ? { servedAs: forge.servedAs } : {}),
          ok: !forge.problem,
        },
      }
    : {};
  return {
    status: ok ? 200 : 503,
    body: detailed
      ? { ...report, ok, problems, nats: { ok: true }, ...forgeBody, cache: cacheOf(config) }
      : { ok, nats: { ok: true }, problems, ...forgeBody, cache: cacheOf(config) },
  };
}

/** Whether the Actions cache is served (a CACHE_BUCKET binding): on or off, never a problem. */
const cacheOf = (config: Config) => ({ on: config.cache.enabled });

/**
 * What the cloud backends keep refusing (state/driver-figures.ts): our credentials or a template's
 * field, each by the variable to fix; and what of their placements their cloud's offer, as the tick
 * last read it, does not hold (a name no create would take), unless a refusal names it already.
 * One read for every such backend; none without one.
 */
async function refusalsOf(handle: NatsHandle, config: Config): Promise<string[]> {
  const clouds = config.backends.filter((b) => driverModule(b.driver).figures);
  if (!clouds.length) return [];
  const read = await readManyJson<DriverFigures>(
    handle,
    recordsBucket({ stream: config.stream, subjectBase: config.subjectBase }),
    clouds.map((b) => figuresKey(b.backend)),
  );
  const now = Date.now();
  return clouds.flatMap((b) => {
    const figures = read.get(figuresKey(b.backend))?.value;
    const refused = freshRefusals(figures, now);
    const module = driverModule(b.driver);
    const settings = config.drivers[module.settingsKey];
    const pools = config.pools.filter((p) => p.backend === b.backend).map(placementOf);
    const offered = settings === undefined ? [] : (module.offerProblems?.(settings, b, pools, figures?.offer) ?? []);
    return [
      ...refused.map(([variable, r]) => `backend ${b.backend}: ${r.message}; fix ${variable}`),
      ...offered.filter((m) => !refused.some(([v]) => v === m.variable)).map((m) => `backend ${b.backend}: ${m.message}; fix ${m.variable}`),
    ];
  });
}

/**
 * The forge's version: FORGE=forgejo, what Forgejo reports and what is wrong with it (see
 * forge/forgejo/version.ts); Gitea, the release served (forge/gitea/release.ts), never a problem.
 */
async function forgeCheck(config: Config): Promise<{ version?: string; problem?: string; servedAs?: string } | undefined> {
  const timeoutMs = Math.min(config.backendTimeoutMs, 2_000);
  const f = config.forgejo;
  if (f) return forgejoVersion(f.url, createForgejoClient({ url: f.url, apiToken: f.apiToken, timeoutMs }));
  const g = config.gitea;
  if (!g) return undefined;
  const release = await giteaRelease({ config, now: Date.now, sink: consoleSink }, createGiteaClient(g, timeoutMs));
  return { version: release.version, ...(release.unknown ? { servedAs: release.unknown } : {}) };
}
