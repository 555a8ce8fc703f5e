// The one place that reads the Worker's environment. Every problem is reported at once; values of
// secrets never appear in an error.
import { z } from "zod";
import { DEFAULT_RUNNER_IMAGE, DRIVERS, parseBackends, type BackendConfig, type KubernetesConfig } from "./backends/config.ts";
import { parseGiteaSecrets, parseScope, type GiteaConfig } from "./gitea/config.ts";
import { BACKENDS, type Backend } from "./names.ts";

const STREAM_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const SUBJECT_BASE = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;
const TRUST_DOMAIN = /^[a-z0-9._-]{1,255}$/;

const intFrom = (min: number, max: number) =>
  z.preprocess(
    (v) => (typeof v === "string" && v.trim() !== "" ? Number(v) : v),
    z
      .number({ error: "must be an integer" })
      .int({ message: "must be an integer" })
      .min(min, { message: min === 0 ? "must be non-negative (0 or more)" : `must be at least ${min}` })
      .max(max, { message: `must be at most ${max}` }),
  );
const optionalString = z.string().trim().min(1).optional().catch(undefined);
const secret = (minLength: number) =>
  z.string({ message: "is required (a secret: wrangler secret put)" }).min(minLength, { message: `must be at least ${minLength} characters` });
const wsUrls = z.string({ message: "is required" }).transform((value, ctx) => {
  const urls = value.split(",").map((s) => s.trim()).filter(Boolean);
  if (!urls.length) ctx.addIssue({ code: "custom", message: "is required" });
  for (const url of urls) {
    if (!/^wss?:\/\/[^\s/]+/.test(url)) ctx.addIssue({ code: "custom", message: "must be comma-separated ws:// or wss:// URLs" });
  }
  return urls;
});
const httpUrl = z
  .string({ message: "is required" })
  .pipe(z.url({ protocol: /^https?$/, message: "must be an http(s) URL" }))
  .transform((u) => u.replace(/\/+$/, ""));

const envSchema = z.object({
  NATS_URL: wsUrls,
  NATS_CREDS: optionalString,
  NATS_TOKEN: optionalString,
  NATS_USER: optionalString,
  NATS_PASS: optionalString,
  TRUST_DOMAIN: z.string({ message: "is required" }).regex(TRUST_DOMAIN, { message: "must be a SPIFFE trust domain: lowercase letters, digits, '.', '_', '-'" }),
  PUBLIC_URL: httpUrl,
  ASSIGNMENT_STREAM: z.string().regex(STREAM_NAME, { message: "must be 1-64 of [A-Za-z0-9_-]" }).default("ASSIGNMENTS"),
  ASSIGNMENT_SUBJECT_BASE: z.string().regex(SUBJECT_BASE, { message: "must be dot-separated tokens without wildcards" }).default("assignments"),
  CAPACITY_POD: intFrom(0, 10_000).default(10),
  CAPACITY_VM: intFrom(0, 10_000).default(10),
  RETRY_DELAY_MS: intFrom(1, 3_600_000).optional(),
  CLAIM_TIMEOUT_MS: intFrom(1_000, 86_400_000).default(240_000),
  ACK_WAIT_MS: intFrom(1_000, 3_600_000).default(60_000),
  JETSTREAM_REPLICAS: z
    .preprocess((v) => (typeof v === "number" ? String(v) : typeof v === "string" ? v.trim() : v), z.enum(["1", "3", "5"], { message: "must be 1, 3 or 5" }))
    .default("1")
    .transform(Number),
  BATCH_SIZE: intFrom(1, 1_000).optional(),
  RECONCILE_BUDGET_MS: intFrom(100, 900_000).default(20_000),
  LEASE_TTL_MS: intFrom(60_000, 7 * 86_400_000).default(21_600_000),
  DISPATCH_TOKEN: secret(16),
  CLAIM_SIGNING_KEY: secret(32),
  METRICS_TOKEN: secret(16).optional(),
  STATUS_TOKEN: secret(16).optional(),
  POD_BACKEND_URL: httpUrl.optional(),
  POD_BACKEND_TOKEN: optionalString,
  VM_BACKEND_URL: httpUrl.optional(),
  VM_BACKEND_TOKEN: optionalString,
  BACKEND_TIMEOUT_MS: intFrom(100, 120_000).default(10_000),
  EAGER_RECONCILE: z.enum(["true", "false"], { message: "must be true or false" }).default("true"),
  GITEA_URL: httpUrl.optional(),
  GITEA_WEBHOOK_SECRET: optionalString,
  GITEA_RUNNER_REGISTRATION_TOKEN: optionalString,
  GITEA_API_TOKEN: optionalString,
  GITEA_SCOPE: z
    .string()
    .regex(/^(admin|org:[A-Za-z0-9_.-]+|repo:[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)$/, { message: "must be admin, org:<name> or repo:<owner>/<name>" })
    .default("admin"),
  RUNNER_NAME_PREFIX: z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}$/, { message: "must be 1-32 of [a-z0-9-]" }).default("gdr"),
  RUNS_ON_ROUTES: z.string().optional(),
  RUNNER_IDENTITY_KEY: optionalString,
  WEBHOOK_MAX_BYTES: intFrom(1_024, 25 * 1024 * 1024).default(1024 * 1024),
  GITEA_JOB_PAGES: intFrom(0, 100).default(5),
  CLEANUP_GRACE_MS: intFrom(0, 86_400_000).default(300_000),
  POD_DRIVER: z.enum(DRIVERS).default("http"),
  VM_DRIVER: z.enum(DRIVERS).default("http"),
  K8S_API_URL: httpUrl.optional(),
  K8S_TOKEN: optionalString,
  K8S_NAMESPACE: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, { message: "must be a Kubernetes namespace name" }).default("default"),
  RUNNER_IMAGE: z.string().min(1).default(DEFAULT_RUNNER_IMAGE),
  RUNNER_VM_IMAGE: optionalString,
  POD_TEMPLATE: optionalString,
  VM_TEMPLATE: optionalString,
});

export type NatsAuth =
  | { kind: "none" }
  | { kind: "token"; token: string }
  | { kind: "userpass"; user: string; pass: string }
  | { kind: "creds"; creds: string };

export type { BackendConfig, KubernetesConfig };
export type { GiteaConfig, GiteaScope } from "./gitea/config.ts";

/** Validated configuration. Secrets live here and nowhere else; never log this object. */
export interface Config {
  natsServers: string[];
  natsAuth: NatsAuth;
  trustDomain: string;
  publicUrl: string;
  stream: string;
  subjectBase: string;
  capacity: Record<Backend, number>;
  /** Backends with capacity > 0, each with its driver settings. */
  backends: BackendConfig[];
  /** Settings of the kubernetes and kubevirt drivers, when one is in use. */
  kubernetes: KubernetesConfig | undefined;
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
  claimSigningKey: string;
  backendTimeoutMs: number;
  /** Reconcile right after a publish, webhook or claim (waitUntil); false leaves it to the cron. */
  eagerReconcile: boolean;
  /** Gitea integration; undefined when GITEA_URL is unset. */
  gitea: GiteaConfig | undefined;
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
}

export function loadProvisionConfig(env: Record<string, unknown>): ProvisionConfig {
  const parsed = layoutSchema.safeParse(blankToUndefined(env));
  const problems = parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join(".")} ${i.message}`);
  const auth = parseAuth(env, problems);
  if (!parsed.success || problems.length) throw new ConfigError(problems);
  const e = parsed.data;
  return {
    natsServers: e.NATS_URL,
    natsAuth: auth,
    stream: e.ASSIGNMENT_STREAM,
    subjectBase: e.ASSIGNMENT_SUBJECT_BASE,
    ackWaitMs: e.ACK_WAIT_MS,
    replicas: e.JETSTREAM_REPLICAS,
    backends: BACKENDS.map((backend) => ({ backend, capacity: backend === "pod" ? e.CAPACITY_POD : e.CAPACITY_VM })).filter((b) => b.capacity > 0),
  };
}

/** Parses the environment; throws ConfigError listing every problem. */
export function loadConfig(env: Record<string, unknown>): Config {
  const raw = blankToUndefined(env);
  const parsed = envSchema.safeParse(raw);
  const problems = parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join(".")} ${i.message}`);
  const auth = parseAuth(env, problems);
  const giteaParts = raw.GITEA_URL ? parseGiteaSecrets(raw, problems) : undefined;
  if (!parsed.success) throw new ConfigError(problems);
  const e = parsed.data;
  const { backends, kubernetes } = parseBackends(
    BACKENDS.map((backend) => {
      const pod = backend === "pod";
      return {
        backend,
        capacity: pod ? e.CAPACITY_POD : e.CAPACITY_VM,
        batchSize: e.BATCH_SIZE,
        driver: pod ? e.POD_DRIVER : e.VM_DRIVER,
        url: pod ? e.POD_BACKEND_URL : e.VM_BACKEND_URL,
        token: pod ? e.POD_BACKEND_TOKEN : e.VM_BACKEND_TOKEN,
      };
    }),
    e,
    Boolean(e.GITEA_URL),
    problems,
  );
  const gitea =
    e.GITEA_URL && giteaParts
      ? {
          ...giteaParts,
          url: e.GITEA_URL,
          scope: parseScope(e.GITEA_SCOPE),
          runnerNamePrefix: e.RUNNER_NAME_PREFIX,
          webhookMaxBytes: e.WEBHOOK_MAX_BYTES,
          jobPages: e.GITEA_JOB_PAGES,
          cleanupGraceMs: e.CLEANUP_GRACE_MS,
        }
      : undefined;
  if (gitea) {
    for (const b of new Set(gitea.routes.map((r) => r.backend))) {
      if (!backends.some((c) => c.backend === b)) problems.push(`RUNS_ON_ROUTES routes jobs to backend ${b}, which is disabled (CAPACITY_${b.toUpperCase()}=0)`);
    }
  }
  if (e.ACK_WAIT_MS < e.RECONCILE_BUDGET_MS + ACK_WAIT_HEADROOM_MS) {
    // A pass keeps deliveries (held for a claim, or in work) until its budget ends, plus one last
    // look; were AckWait shorter, JetStream would deliver them a second time meanwhile.
    problems.push(`ACK_WAIT_MS must be at least RECONCILE_BUDGET_MS + ${ACK_WAIT_HEADROOM_MS} (${e.RECONCILE_BUDGET_MS + ACK_WAIT_HEADROOM_MS}), got ${e.ACK_WAIT_MS}`);
  }
  if (problems.length) throw new ConfigError(problems);
  return {
    natsServers: e.NATS_URL,
    natsAuth: auth,
    trustDomain: e.TRUST_DOMAIN,
    publicUrl: e.PUBLIC_URL,
    stream: e.ASSIGNMENT_STREAM,
    subjectBase: e.ASSIGNMENT_SUBJECT_BASE,
    capacity: { pod: e.CAPACITY_POD, vm: e.CAPACITY_VM },
    backends,
    kubernetes,
    retryDelayMs: e.RETRY_DELAY_MS,
    claimTimeoutMs: e.CLAIM_TIMEOUT_MS,
    ackWaitMs: e.ACK_WAIT_MS,
    replicas: e.JETSTREAM_REPLICAS,
    reconcileBudgetMs: e.RECONCILE_BUDGET_MS,
    leaseTtlMs: e.LEASE_TTL_MS,
    dispatchToken: e.DISPATCH_TOKEN,
    metricsToken: e.METRICS_TOKEN,
    statusToken: e.STATUS_TOKEN,
    claimSigningKey: e.CLAIM_SIGNING_KEY,
    backendTimeoutMs: e.BACKEND_TIMEOUT_MS,
    eagerReconcile: e.EAGER_RECONCILE === "true",
    gitea,
  };
}

const ACK_WAIT_HEADROOM_MS = 10_000;

function blankToUndefined(env: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, typeof v === "string" && v.trim() === "" ? undefined : v]));
}

function parseAuth(env: Record<string, unknown>, problems: string[]): NatsAuth {
  const str = (k: string) => (typeof env[k] === "string" && (env[k] as string).trim() ? (env[k] as string) : undefined);
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
