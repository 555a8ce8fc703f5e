// Test environments: a unique stream (and so unique consumers and buckets) per test, so that
// tests can share one nats-server and run in parallel. Runs in Node and in workerd alike.
import type { Assignment } from "../../src/model/assignment.ts";
import { ConfigError, loadConfig, type Config } from "../../src/app/config.ts";
import { claimToken } from "../../src/model/crypto.ts";
import { provision } from "../../src/nats/layout.ts";
import { incarnationOf } from "../../src/state/records.ts";
import { withNats } from "../../src/nats/connection.ts";

export const TEST_SECRETS = {
  WEBHOOK_SECRET: "gitea-webhook-secret-for-tests",
  // base64 of 32 bytes 0x01..0x20
  RUNNER_IDENTITY_KEY: "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=",
  DISPATCH_TOKEN: "dispatch-token-for-tests-0001",
  CLAIM_SIGNING_KEY: "claim-signing-key-for-tests-0123456789",
  BACKEND_TOKEN: "backend-token",
} as const;

let counter = 0;
export function uniqueName(prefix = "T"): string {
  counter++;
  return `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}_${counter}`;
}

/** Worker variables for one test; `backendUrl` gets a per-test namespace on the fake backend. */
export function testEnv(natsWsUrl: string, backendUrl: string, overrides: Record<string, unknown> = {}): Record<string, string> {
  const stream = uniqueName("S");
  return {
    NATS_URL: natsWsUrl,
    TRUST_DOMAIN: "example.org",
    PUBLIC_URL: "https://dispatch.example.org",
    ASSIGNMENT_STREAM: stream,
    ASSIGNMENT_SUBJECT_BASE: `asg.${stream.toLowerCase()}`,
    DISPATCH_TOKEN: TEST_SECRETS.DISPATCH_TOKEN,
    CLAIM_SIGNING_KEY: TEST_SECRETS.CLAIM_SIGNING_KEY,
    POD_BACKEND_URL: `${backendUrl}/${stream}`,
    POD_BACKEND_TOKEN: TEST_SECRETS.BACKEND_TOKEN,
    CAPACITY_VM: "0",
    ...Object.fromEntries(Object.entries(overrides).map(([k, v]) => [k, String(v)])),
  };
}

export async function provisionEnv(env: Record<string, string>): Promise<Config> {
  const config = loadConfig(env);
  await withNats(config, (h) => provision(h, config));
  return config;
}

/** A valid pod assignment in the test trust domain. */
export function assignment(id: string, labels = ["ubuntu-latest"]): Assignment {
  return { version: 1, id, backend: "pod", workload: `spiffe://example.org/runner/pod/${id}`, labels, createdAt: "2026-11-30T10:00:00Z" };
}

export const TEST_ROUTES = [{ backend: "pod", labels: ["ubuntu-latest:docker://node:20-bookworm", "ubuntu-22.04:docker://node:20-bookworm"] }];

/** Worker variables with the Gitea integration on, against the shared fake Gitea. */
export function giteaTestEnv(natsWsUrl: string, backendUrl: string, giteaUrl: string, overrides: Record<string, unknown> = {}): Record<string, string> {
  const env = testEnv(natsWsUrl, backendUrl, overrides);
  return {
    GITEA_URL: `${giteaUrl}/${env.ASSIGNMENT_STREAM}`,
    GITEA_WEBHOOK_SECRET: TEST_SECRETS.WEBHOOK_SECRET,
    GITEA_API_TOKEN: "gitea-api-token-0000",
    RUNNER_IDENTITY_KEY: TEST_SECRETS.RUNNER_IDENTITY_KEY,
    RUNS_ON_ROUTES: JSON.stringify(TEST_ROUTES),
    ...env,
    ...Object.fromEntries(Object.entries(overrides).map(([k, v]) => [k, String(v)])),
  };
}

/**
 * The claim token a runner is handed for the record created at `receivedAt` (an assignment view's
 * field); an unknown id gets one for an incarnation no record has.
 */
export async function testClaimToken(id: string, receivedAt?: string, key: string = TEST_SECRETS.CLAIM_SIGNING_KEY): Promise<string> {
  return claimToken(key, id, receivedAt ? incarnationOf({ receivedAt }) : "0");
}

/** The claim token of the assignment's current record, read over the API with `get`. */
export async function currentClaimToken(get: (path: string) => Promise<Response>, id: string, key?: string): Promise<string> {
  const res = await get(`/v1/assignments/${encodeURIComponent(id)}`);
  const receivedAt = res.status === 200 ? ((await res.json()) as { receivedAt: string }).receivedAt : undefined;
  return testClaimToken(id, receivedAt, key);
}

/** Worker variables with RUNNER_POOLS instead of RUNS_ON_ROUTES (a vm backend on the same fake, its own namespace). */
export function poolsTestEnv(
  natsWsUrl: string,
  backendUrl: string,
  giteaUrl: string,
  pools: unknown[],
  overrides: Record<string, unknown> = {},
): Record<string, string> {
  const { RUNS_ON_ROUTES: _routes, ...env } = giteaTestEnv(natsWsUrl, backendUrl, giteaUrl, { CAPACITY_VM: 10, ...overrides });
  return { VM_BACKEND_URL: `${env.POD_BACKEND_URL}-vm`, VM_BACKEND_TOKEN: TEST_SECRETS.BACKEND_TOKEN, ...env, RUNNER_POOLS: JSON.stringify(pools) };
}

/** Worker variables for FORGE=forgejo against the fake Forgejo (its own tenant per stream name). */
export function forgejoTestEnv(natsWsUrl: string, backendUrl: string, forgejoUrl: string, overrides: Record<string, unknown> = {}): Record<string, string> {
  const env = testEnv(natsWsUrl, backendUrl, overrides);
  return {
    FORGE: "forgejo",
    GITEA_URL: `${forgejoUrl}/${env.ASSIGNMENT_STREAM}`,
    GITEA_API_TOKEN: "forgejo-api-token-0000",
    GITEA_WEBHOOK_SECRET: TEST_SECRETS.WEBHOOK_SECRET,
    RUNNER_IDENTITY_KEY: TEST_SECRETS.RUNNER_IDENTITY_KEY,
    RUNS_ON_ROUTES: JSON.stringify(TEST_ROUTES),
    // Polls are driven by the tests (runDurableObjectAlarm); the alarm's own period stays out of the way.
    FORGEJO_POLL_MS: "60000",
    ...env,
    ...Object.fromEntries(Object.entries(overrides).map(([k, v]) => [k, String(v)])),
  };
}

/** Both backends on the kubernetes and kubevirt drivers, against a cluster that is never called. */
export const KUBERNETES_TEST_VARS = {
  CAPACITY_VM: "10",
  POD_DRIVER: "kubernetes",
  VM_DRIVER: "kubevirt",
  K8S_API_URL: "https://k8s.example.org",
  K8S_TOKEN: "k8s-token",
  RUNNER_VM_IMAGE: "registry.example.org/runner-vm:1",
} as const;

/** Every problem loadConfig finds in `env`; none when it loads. */
export function configProblems(env: Record<string, unknown>): string[] {
  try {
    loadConfig(env);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}
