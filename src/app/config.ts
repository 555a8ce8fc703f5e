// The one place that reads the Worker's environment. Every problem is reported at once; values of
// secrets never appear in an error.
import { parseBackends, type BackendConfig, type BackendEnv, type DriverSettings, type KubernetesConfig } from "../backends/config.ts";
import { parseNamedBackends } from "../backends/named.ts";
import { envSchema, JSON_VARIABLES, type ForgeKind, type LocationHint } from "./config-schema.ts";
import { parseForgejoConfig, type ForgejoConfig } from "../forge/forgejo/config.ts";
import { checkScopes, parseGiteaSecrets, type GiteaConfig } from "../forge/gitea/config.ts";
import { parseScope } from "../forge/gitea/scope.ts";
import { BACKENDS, type Backend } from "../nats/names.ts";
import { checkPools } from "../pools/check.ts";
import { parsePools, type Pool } from "../pools/config.ts";
import { NO_QUOTAS, parseQuotas, type Quotas } from "../quotas/config.ts";
import type { NatsAuth } from "../nats/connection.ts";
import type { Config } from "../domain/context.ts";

export type { NatsAuth };

export type { BackendConfig, KubernetesConfig };
export type { GiteaConfig } from "../forge/gitea/config.ts";
export type { GiteaScope } from "../forge/gitea/scope.ts";

// The configuration's fields are declared here, where it is read from the environment, into the
// domain's Config (module augmentation, as Hono's ContextVariableMap): a step names the fields it
// reads (Settings<K>, domain/context.ts) without the domain importing the wiring.
declare module "../domain/context.ts" {
  /** Validated configuration. Secrets live here and nowhere else; never log this object. */
  interface Config {
    natsServers: string[];
    natsAuth: NatsAuth;
    trustDomain: string;
    publicUrl: string;
    stream: string;
    subjectBase: string;
    /** Every backend's capacity, by name: read it with capacityOf (a name may be `constructor`). */
    capacity: Record<Backend, number>;
    /** Backends with capacity > 0, each with its driver settings. */
    backends: BackendConfig[];
    /** Settings of the kubernetes and kubevirt drivers, when one is in use. */
    kubernetes: KubernetesConfig | undefined;
    /** Each driver's shared settings in use, by its settingsKey (backends/drivers.ts). */
    drivers: DriverSettings;
    retryDelayMs: number | undefined;
    claimTimeoutMs: number;
    ackWaitMs: number;
    /** JETSTREAM_REPLICAS: what /healthz expects of the stream, consumers and buckets. */
    replicas: number;
    reconcileBudgetMs: number;
    leaseTtlMs: number;
    dispatchToken: string;
    /** Bearer token of GET /metrics; the endpoint does not exist without it. */
    metricsToken: string | undefined;
    /** Password of the status page (HTTP Basic, any user name); the page does not exist without it. */
    statusToken: string | undefined;
    /** STATUS_TOP_OWNERS: owners listed by name in /metrics, /status and /v1/status; the rest sum as `other`. */
    statusTopOwners: number;
    claimSigningKey: string;
    /** The Actions cache: on when the Worker has a CACHE_BUCKET binding (an R2 bucket), with its limits. */
    cache: { enabled: boolean; maxEntryBytes: number; repoBytes: number };
    /** DISPATCH_TOKEN_PREVIOUS and CLAIM_SIGNING_KEY_PREVIOUS: still accepted during a rotation; never used to sign. */
    previous: { dispatchToken: string | undefined; claimSigningKey: string | undefined };
    backendTimeoutMs: number;
    /** Reconcile right after a publish, webhook or claim (waitUntil); false leaves it to the cron. */
    eagerReconcile: boolean;
    /** FORGE: where jobs come from. */
    forge: ForgeKind;
    /** Gitea integration; undefined when GITEA_URL is unset, or with FORGE=forgejo. */
    gitea: GiteaConfig | undefined;
    /** Forgejo integration (FORGE=forgejo). */
    forgejo: ForgejoConfig | undefined;
    /** NATS_GATEWAY*: the request path's warm connection (src/gateway/). */
    gateway: GatewaySettings;
    /** RUNNER_POOLS (or RUNS_ON_ROUTES as pools); none without the Gitea integration. */
    pools: Pool[];
    /** WARM_GRACE_MS: a new job waits this long for an idle warm runner of its pool before its own is asked for. */
    warmGraceMs: number;
    /** MAX_RERUNS: a job lost with an interrupted runner is rerun while its run's attempt is at most this (0: never). */
    maxReruns: number;
    /** FAIR_SHARE: a full backend's free slots go by turn (quotas/), not first come first served. */
    fairShare: boolean;
    /** QUOTAS: limits per owner and repository, weights per owner. */
    quotas: Quotas;
  }
}

export type { Config };

export interface GatewaySettings {
  enabled: boolean;
  shards: number;
  location: LocationHint | undefined;
}

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid configuration: ${problems.join("; ")}`);
    this.problems = problems;
    this.name = "ConfigError";
  }
}

const layoutSchema = envSchema.pick({
  NATS_URL: true,
  ASSIGNMENT_STREAM: true,
  ASSIGNMENT_SUBJECT_BASE: true,
  CAPACITY_POD: true,
  CAPACITY_VM: true,
  ACK_WAIT_MS: true,
  JETSTREAM_REPLICAS: true,
  FAIR_SHARE: true,
});

/** What `npm run provision` needs: NATS and the layout, no Worker secrets. */
export interface ProvisionConfig {
  natsServers: string[];
  natsAuth: NatsAuth;
  stream: string;
  subjectBase: string;
  ackWaitMs: number;
  /** JETSTREAM_REPLICAS: replicas of the stream, its consumers and the KV buckets. */
  replicas: number;
  backends: { backend: Backend; capacity: number }[];
  /** RUNNER_POOLS (or RUNS_ON_ROUTES): a pool with maxRunners has a slots stream. */
  pools: Pool[];
  /** FAIR_SHARE: the consumers' window is wider than the capacity (layout.ts consumerLimit). */
  fairShare: boolean;
}

export function loadProvisionConfig(env: Record<string, unknown>): ProvisionConfig {
  const problems: string[] = [];
  const raw = normalizeEnv(env, problems);
  const parsed = layoutSchema.safeParse(raw);
  if (!parsed.success) problems.push(...parsed.error.issues.map((i) => `${i.path.join(".")} ${i.message}`));
  const auth = parseAuth(raw, problems);
  const text = (k: string) => (typeof raw[k] === "string" ? raw[k] : undefined);
  const pools = parsePools(text("RUNNER_POOLS"), text("RUNS_ON_ROUTES"), problems) ?? [];
  const named = parseNamedBackends(text("BACKENDS"), raw, problems);
  if (!parsed.success || problems.length) throw new ConfigError(problems);
  const e = parsed.data;
  return {
    pools,
    natsServers: e.NATS_URL,
    natsAuth: auth,
    stream: e.ASSIGNMENT_STREAM,
    subjectBase: e.ASSIGNMENT_SUBJECT_BASE,
    ackWaitMs: e.ACK_WAIT_MS,
    replicas: e.JETSTREAM_REPLICAS,
    backends: [
      ...BACKENDS.map((backend) => ({ backend, capacity: backend === "pod" ? e.CAPACITY_POD : e.CAPACITY_VM })),
      ...named.map((b) => ({ backend: b.backend, capacity: b.capacity })),
    ].filter((b) => b.capacity > 0),
    fairShare: e.FAIR_SHARE === "on",
  };
}

/** Parses the environment; throws ConfigError listing every problem. */
export function loadConfig(env: Record<string, unknown>): Config {
  const problems: string[] = [];
  const raw = normalizeEnv(env, problems);
  const parsed = envSchema.safeParse(raw);
  if (!parsed.success) problems.push(...parsed.error.issues.map((i) => `${i.path.join(".")} ${i.message}`));
  const auth = parseAuth(raw, problems);
  const forgejo = raw.FORGE === "forgejo";
  const giteaParts = raw.GITEA_URL && !forgejo ? parseGiteaSecrets(raw, problems) : undefined;
  const text = (k: string) => (typeof raw[k] === "string" ? raw[k] : undefined);
  const pools: Pool[] = (raw.GITEA_URL || forgejo ? parsePools(text("RUNNER_POOLS"), text("RUNS_ON_ROUTES"), problems) : undefined) ?? [];
  const quotas = parseQuotas(text("QUOTAS"), problems);
  const named = parseNamedBackends(text("BACKENDS"), raw, problems);
  if (quotas !== NO_QUOTAS && raw.FAIR_SHARE === "off")
    problems.push("QUOTAS needs FAIR_SHARE=on (the default): a job at its limit waits its turn in the wait set");
  if (!parsed.success) throw new ConfigError(problems);
  const e = parsed.data;
  const { backends, drivers, kubernetes } = parseBackends(
    BACKENDS.map((backend): BackendEnv => {
      const pod = backend === "pod";
      return {
        backend,
        capacity: pod ? e.CAPACITY_POD : e.CAPACITY_VM,
        batchSize: e.BATCH_SIZE,
        driver: pod ? e.POD_DRIVER : e.VM_DRIVER,
        url: pod ? e.POD_BACKEND_URL : e.VM_BACKEND_URL,
        token: pod ? e.POD_BACKEND_TOKEN : e.VM_BACKEND_TOKEN,
      };
    }).concat(named.map((b) => ({ ...b, batchSize: b.batchSize ?? e.BATCH_SIZE }))),
    { ...raw, ...e },
    Boolean(e.GITEA_URL),
    problems,
  );
  const gitea =
    e.GITEA_URL && giteaParts && e.FORGE === "gitea"
      ? {
          ...giteaParts,
          url: e.GITEA_URL,
          scope: parseScope(e.GITEA_SCOPE),
          runnerScope: e.RUNNER_SCOPE,
          runnerNamePrefix: e.RUNNER_NAME_PREFIX,
          webhookMaxBytes: e.WEBHOOK_MAX_BYTES,
          jobPages: e.GITEA_JOB_PAGES,
          cleanupGraceMs: e.CLEANUP_GRACE_MS,
          ...(e.GITEA_VERSION ? { version: e.GITEA_VERSION } : {}),
        }
      : undefined;
  const forgejoConfig = e.FORGE === "forgejo" ? parseForgejoConfig(raw, e, pools, problems) : undefined;
  if (e.GITEA_URL && e.FORGE === "gitea") {
    checkScopes(e, pools, problems);
    if (e.GITEA_SCOPE === "user") problems.push("GITEA_SCOPE=user is Forgejo's (FORGE=forgejo); with Gitea use admin, org:<name> or repo:<owner>/<name>");
  }
  if (e.RUNNER_POOLS && !e.GITEA_URL) problems.push("RUNNER_POOLS needs the Gitea integration (GITEA_URL): a pool's runners are registered with Gitea");
  checkPools(pools, e.RUNNER_POOLS ? "RUNNER_POOLS" : "RUNS_ON_ROUTES", backends, drivers, problems);
  if (e.ACK_WAIT_MS < e.RECONCILE_BUDGET_MS + ACK_WAIT_HEADROOM_MS) {
    // A pass keeps deliveries (held for a claim, or in work) until its budget ends, plus one last
    // look; were AckWait shorter, JetStream would deliver them a second time meanwhile.
    problems.push(
      `ACK_WAIT_MS must be at least RECONCILE_BUDGET_MS + ${ACK_WAIT_HEADROOM_MS} (${e.RECONCILE_BUDGET_MS + ACK_WAIT_HEADROOM_MS}), got ${e.ACK_WAIT_MS}`,
    );
  }
  if (problems.length) throw new ConfigError(problems);
  return {
    natsServers: e.NATS_URL,
    natsAuth: auth,
    trustDomain: e.TRUST_DOMAIN,
    publicUrl: e.PUBLIC_URL,
    stream: e.ASSIGNMENT_STREAM,
    subjectBase: e.ASSIGNMENT_SUBJECT_BASE,
    capacity: capacities([["pod", e.CAPACITY_POD], ["vm", e.CAPACITY_VM], ...named.map((b): [string, number] => [b.backend, b.capacity])]),
    backends,
    kubernetes,
    drivers,
    retryDelayMs: e.RETRY_DELAY_MS,
    claimTimeoutMs: e.CLAIM_TIMEOUT_MS,
    ackWaitMs: e.ACK_WAIT_MS,
    replicas: e.JETSTREAM_REPLICAS,
    reconcileBudgetMs: e.RECONCILE_BUDGET_MS,
    leaseTtlMs: e.LEASE_TTL_MS,
    dispatchToken: e.DISPATCH_TOKEN,
    metricsToken: e.METRICS_TOKEN,
    statusToken: e.STATUS_TOKEN,
    statusTopOwners: e.STATUS_TOP_OWNERS,
    claimSigningKey: e.CLAIM_SIGNING_KEY,
    cache: { enabled: isBinding(raw.CACHE_BUCKET), maxEntryBytes: e.CACHE_MAX_ENTRY_BYTES, repoBytes: e.CACHE_REPO_BYTES },
    previous: { dispatchToken: e.DISPATCH_TOKEN_PREVIOUS, claimSigningKey: e.CLAIM_SIGNING_KEY_PREVIOUS },
    backendTimeoutMs: e.BACKEND_TIMEOUT_MS,
    eagerReconcile: e.EAGER_RECONCILE === "true",
    forge: e.FORGE,
    gitea,
    forgejo: forgejoConfig,
    gateway: { enabled: e.NATS_GATEWAY === "on", shards: e.NATS_GATEWAY_SHARDS, location: e.NATS_GATEWAY_LOCATION },
    pools,
    warmGraceMs: e.WARM_GRACE_MS,
    maxReruns: e.MAX_RERUNS,
    fairShare: e.FAIR_SHARE === "on",
    quotas: quotas ?? NO_QUOTAS,
  };
}

const ACK_WAIT_HEADROOM_MS = 10_000;

/** A binding (an R2 bucket) is an object; a variable of that name is not one. */
const isBinding = (v: unknown) => typeof v === "object" && v !== null;

/**
 * Capacities by backend name. A plain object, since the configuration crosses Durable Object RPC
 * (structured clone refuses an object without a prototype): read it with capacityOf.
 */
function capacities(entries: [Backend, number][]): Record<Backend, number> {
  return Object.fromEntries(entries);
}

/**
 * The environment as the schema reads it. wrangler.jsonc's `vars` reach the Worker as JSON values:
 * a JSON variable written as an object or array is read as its text, a number or boolean as its
 * text; an object where no JSON belongs is a problem, never dropped. Bindings are left alone.
 */
export function normalizeEnv(env: Record<string, unknown>, problems: string[] = []): Record<string, unknown> {
  const out: Record<string, unknown> = { ...env };
  for (const k of Object.keys(envSchema.shape)) {
    if (!Object.hasOwn(env, k)) continue;
    const v = env[k];
    if (typeof v === "string") out[k] = v.trim() === "" ? undefined : v;
    else if (v === undefined || v === null) out[k] = undefined;
    else if (JSON_VARIABLES.includes(k)) out[k] = JSON.stringify(v);
    else if (typeof v === "number" || typeof v === "boolean") out[k] = String(v);
    else {
      problems.push(`${k} must be a string, number or boolean, not JSON (only ${JSON_VARIABLES.join(", ")} hold JSON)`);
      out[k] = undefined;
    }
  }
  return out;
}

function parseAuth(env: Record<string, unknown>, problems: string[]): NatsAuth {
  const str = (k: string) => (typeof env[k] === "string" && env[k].trim() ? env[k] : undefined);
  const creds = str("NATS_CREDS");
  const token = str("NATS_TOKEN");
  const user = str("NATS_USER");
  const pass = str("NATS_PASS");
  const methods = [creds && "NATS_CREDS", token && "NATS_TOKEN", (user || pass) && "NATS_USER+NATS_PASS"].filter(Boolean);
  if (methods.length > 1) problems.push(`NATS auth: set at most one method, got ${methods.join(", ")}`);
  if ((user && !pass) || (pass && !user)) problems.push("NATS_USER and NATS_PASS must be set together");
  if (creds) return { kind: "creds", creds };
  if (token) return { kind: "token", token };
  if (user && pass) return { kind: "userpass", user, pass };
  return { kind: "none" };
}
