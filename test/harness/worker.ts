// Drives the Worker inside workerd: HTTP requests, cron ticks, captured log lines, and the fake
// backend's control API.
import { createExecutionContext, createScheduledController, waitOnExecutionContext } from "cloudflare:test";
import { env as bindings } from "cloudflare:workers";
import { afterEach, beforeEach, inject, vi } from "vitest";
import worker from "../../src/index.ts";
import { GATEWAY_BINDING } from "../../src/gateway/client.ts";
import { POLLER_BINDING } from "../../src/app/forgejo-binding.ts";
import { currentClaimToken, giteaTestEnv, provisionEnv, TEST_SECRETS } from "./env.ts";
import { checkAgainstOpenApi } from "./openapi-check.ts";

/** The test's variables, with the gateway's Durable Object binding of wrangler.jsonc (NATS_GATEWAY decides whether it is used). */
export function withBindings(env: Record<string, string>): Record<string, unknown> {
  const b = bindings as unknown as Record<string, unknown>;
  // The cache's R2 binding only for a test that turns it on: the others run as a deployment without one.
  const cache = env.TEST_CACHE_BUCKET === "on" ? { CACHE_BUCKET: b.CACHE_BUCKET } : {};
  return { [GATEWAY_BINDING]: b[GATEWAY_BINDING], [POLLER_BINDING]: b[POLLER_BINDING], ...cache, ...env };
}

export async function request(env: Record<string, string>, path: string, init: RequestInit = {}): Promise<Response> {
  const ctx = createExecutionContext();
  const started = Date.now();
  const res = await worker.fetch(new Request(`https://dispatch.example.org${path}`, init), withBindings(env), ctx);
  answerTimes.set(res, Date.now() - started);
  await waitOnExecutionContext(ctx);
  await checkAgainstOpenApi(init.method ?? "GET", path, res);
  return res;
}

const answerTimes = new WeakMap<Response, number>();
/** Milliseconds until `res` was answered, apart from the work it left in the background. */
export const answerMs = (res: Response): number => answerTimes.get(res) ?? NaN;

/** The claim token of assignment `id` as its runner is handed it now (from its record; see currentClaimToken). */
export const claimTokenOf = (env: Record<string, string>, id: string, key?: string): Promise<string> =>
  currentClaimToken((path) => request(env, path, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }), id, key);

export async function tick(env: Record<string, string>): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ cron: "* * * * *", scheduledTime: Date.now() }), withBindings(env), ctx);
  await waitOnExecutionContext(ctx);
}

/** Cron ticks, `pauseMs` apart, until `done()` holds or `timeoutMs` passes (the caller asserts). */
export async function tickUntil(env: Record<string, string>, done: () => Promise<boolean>, { timeoutMs = 60_000, pauseMs = 100 } = {}): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done()) && Date.now() < deadline) {
    await sleep(pauseMs);
    await tick(env);
  }
}

export function bearer(token: string, json = false): Record<string, string> {
  return { authorization: `Bearer ${token}`, ...(json ? { "content-type": "application/json" } : {}) };
}

export interface Captured {
  lines: string[];
  events(): { event: string; assignment?: string; backend?: string; retryDelayMs?: number; reason?: string; [k: string]: unknown }[];
  /** The JSON lines with the time each was written. */
  timed(): { at: number; event: Record<string, unknown> }[];
  restore(): void;
}

/** Captures every console line the Worker writes; events() parses the JSON ones. */
export function captureLogs(): Captured {
  const lines: string[] = [];
  const times: number[] = [];
  const push = (...args: unknown[]) => void (lines.push(args.map(String).join(" ")), times.push(Date.now()));
  const spies = [
    vi.spyOn(console, "log").mockImplementation(push),
    vi.spyOn(console, "error").mockImplementation(push),
    vi.spyOn(console, "warn").mockImplementation(push),
  ];
  return {
    lines,
    events: () =>
      lines.flatMap((l) => {
        try {
          return [JSON.parse(l)];
        } catch {
          return [];
        }
      }),
    timed: () =>
      lines.flatMap((l, i) => {
        try {
          return [{ at: times[i]!, event: JSON.parse(l) as Record<string, unknown> }];
        } catch {
          return [];
        }
      }),
    restore: () => spies.forEach((s) => s.mockRestore()),
  };
}

/** Logs captured around each test of the file that calls it (in its top level): the current test's. */
export function logsOfEachTest(): () => Captured {
  let logs: Captured | undefined;
  beforeEach(() => {
    logs = captureLogs();
  });
  afterEach(() => logs?.restore());
  return () => logs!;
}

export interface FakeRunner {
  id: string;
  puts: number;
  claimUrl: string;
  claimToken: string;
  completeUrl: string;
}

export interface FakeBackendState {
  runners: FakeRunner[];
  created: number;
  calls: number;
  maxInFlight: number;
  /** Most runners alive at once: created, and neither completed nor deleted. */
  maxLive: number;
  /** Most live runners at once per owner of their job (lower case). */
  maxLiveByOwner: Record<string, number>;
  /** Calls the flaky mode failed with 503, answered too late, and runners deleted. */
  failed: number;
  hung: number;
  deleted: number;
  requests: { method: string; path: string; headers: Record<string, string>; body: string }[];
}

export function backendControl(env: Record<string, string>) {
  const base = `${env.POD_BACKEND_URL}/_control`;
  return {
    async mode(mode: Record<string, unknown>) {
      await (await fetch(`${base}/mode`, { method: "POST", body: JSON.stringify(mode) })).json();
    },
    async state(): Promise<FakeBackendState> {
      return (await fetch(`${base}/state`)).json();
    },
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A webhook the fake Gitea sent: its action, job, headers and raw body. */
export interface Delivery {
  action: string;
  job: number;
  headers: Record<string, string>;
  body: string;
}

/** A provisioned Worker on the fake Gitea playing `release`, and the controls of Gitea and the backend. */
export async function giteaScene(release: string, overrides: Record<string, unknown> = {}) {
  const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { RETRY_DELAY_MS: 30, ...overrides });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.version(release);
  return { env, gitea, backend: backendControl(env) };
}

export function giteaControl(env: Record<string, string>) {
  const base = `${env.GITEA_URL}/_control`;
  const post = async (what: string, body: unknown) => (await fetch(`${base}/${what}`, { method: "POST", body: JSON.stringify(body) })).json();
  return {
    jobs: (jobs: unknown[]) => post("jobs", jobs),
    version: (version: string) => post("version", { version }),
    /** The instance's [api].MAX_RESPONSE_ITEMS: no page is longer, whatever is asked. */
    maxResponseItems: (max: number) => post("max-response-items", { max }),
    /** The runner named `runner` polls once and takes what Gitea gives it (its in_progress webhook waits in the outbox). */
    pickup: (runner: string) => post("pickup", { runner }) as Promise<{ job: number | null }>,
    runners: (runners: { id: number; name: string }[]) => post("runners", runners),
    /** Every REST API answer comes `ms` late, and every runner registration `registerMs` late. */
    delay: (ms: number, registerMs = 0) => post("delay", { ms, registerMs }),
    /** Gitea answers 500 to deleting these runners. */
    failDelete: (ids: number[]) => post("fail-delete", ids),
    /** A workflow run queues jobs; their queued webhooks wait in the outbox (see deliver). */
    queue: (jobs: { labels: string[]; runMs?: number; id?: number; repository?: string }[]) => post("queue", jobs) as Promise<{ jobs: number[] }>,
    cancel: (id: number) => post("cancel", { id }),
    webhook: (hook: { url?: string; secret: string }) => post("webhook", hook),
    /**
     * Sends the webhooks Gitea has queued to the Worker, in order, as Gitea's deliverer would;
     * those `hold` picks are kept back and returned (a slow delivery), to be sent with `send`.
     */
    async deliver(hold: (d: Delivery) => boolean = () => false): Promise<Delivery[]> {
      const { deliveries } = (await post("deliveries", {})) as { deliveries: Delivery[] };
      await this.send(deliveries.filter((d) => !hold(d)));
      return deliveries.filter(hold);
    },
    async send(deliveries: Delivery[]): Promise<void> {
      for (const d of deliveries) {
        const res = await request(env, "/v1/gitea/webhook", { method: "POST", headers: d.headers, body: d.body });
        await res.body?.cancel();
      }
    },
    async actions(): Promise<{
      jobs: { id: number; status: string; conclusion?: string; runner_id?: number; runner_name?: string }[];
      taken: { job: number; runner: string; at: number; queuedAt: number }[];
    }> {
      return (await fetch(`${base}/actions`)).json();
    },
    async state(): Promise<{
      runners: { id: number; name: string; token: string; uuid: string; labels: string[]; ephemeral: boolean }[];
      registrations: number;
      requests: { method: string; path: string; search: string; headers: Record<string, string>; body: string }[];
    }> {
      return (await fetch(`${base}/state`)).json();
    },
  };
}

/** Delivers the fake Gitea's webhooks and ticks the cron until `done`, as Gitea and the cron would; then delivers what is left. */
export async function runUntil(
  env: Record<string, string>,
  gitea: ReturnType<typeof giteaControl>,
  done: () => Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > until) throw new Error("timed out");
    await gitea.deliver();
    await tick(env);
    await sleep(50);
  }
  await gitea.deliver();
}

/** Runners the fake Gitea sees polling (online) and running no task. */
export async function idleInGitea(gitea: ReturnType<typeof giteaControl>): Promise<number> {
  return (await gitea.state()).runners.filter((r) => (r as { lastOnline?: number }).lastOnline !== undefined && (r as { task?: number }).task === undefined)
    .length;
}
