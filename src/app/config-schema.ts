// What the Worker's environment may hold, variable by variable: the zod schema config.ts parses
// with. Messages name the variable's rule, never its value.
import { z } from "zod";
import { DEFAULT_RUNNER_IMAGE, DRIVERS } from "../backends/config.ts";
import { RUNNER_SCOPES } from "../forge/gitea/scope.ts";

import { FORGES } from "../domain/forge.ts";
export { FORGES, type ForgeKind } from "../domain/forge.ts";
export { parseJsonVariable } from "../model/json-variable.ts";

/**
 * The variables that hold JSON. In wrangler.jsonc each may be written as a JSON value or as a
 * string holding it; config.ts reads both alike.
 */
export const JSON_VARIABLES: readonly string[] = ["RUNNER_POOLS", "QUOTAS", "RUNS_ON_ROUTES", "POD_TEMPLATE", "VM_TEMPLATE", "BACKENDS"];

/** Cloudflare's Durable Object location hints (regions), for NATS_GATEWAY_LOCATION. */
export const LOCATION_HINTS = ["wnam", "enam", "sam", "weur", "eeur", "apac", "oc", "afr", "me"] as const;
export type LocationHint = (typeof LOCATION_HINTS)[number];

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
const optionalString = z.string().trim().min(1).optional();
const secret = (minLength: number) =>
  z.string({ message: "is required (a secret: wrangler secret put)" }).min(minLength, { message: `must be at least ${minLength} characters` });
const wsUrls = z.string({ message: "is required" }).transform((value, ctx) => {
  const urls = value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
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

export const envSchema = z.object({
  NATS_URL: wsUrls,
  NATS_CREDS: optionalString,
  NATS_TOKEN: optionalString,
  NATS_USER: optionalString,
  NATS_PASS: optionalString,
  TRUST_DOMAIN: z
    .string({ message: "is required" })
    .regex(TRUST_DOMAIN, { message: "must be a SPIFFE trust domain: lowercase letters, digits, '.', '_', '-'" }),
  PUBLIC_URL: httpUrl,
  ASSIGNMENT_STREAM: z.string().regex(STREAM_NAME, { message: "must be 1-64 of [A-Za-z0-9_-]" }).default("ASSIGNMENTS"),
  ASSIGNMENT_SUBJECT_BASE: z.string().regex(SUBJECT_BASE, { message: "must be dot-separated tokens without wildcards" }).default("assignments"),
  CAPACITY_POD: intFrom(0, 10_000).default(10),
  CAPACITY_VM: intFrom(0, 10_000).default(10),
  RETRY_DELAY_MS: intFrom(1, 3_600_000).optional(),
  CLAIM_TIMEOUT_MS: intFrom(1_000, 86_400_000).default(240_000),
  ACK_WAIT_MS: intFrom(1_000, 3_600_000).default(60_000),
  /** The Actions cache (src/cache/): one entry's most, and a repository's (beyond it the least recently used go). */
  CACHE_MAX_ENTRY_BYTES: intFrom(1, Number.MAX_SAFE_INTEGER).default(10 * 1024 ** 3),
  CACHE_REPO_BYTES: intFrom(1, Number.MAX_SAFE_INTEGER).default(10_000_000_000),
  JETSTREAM_REPLICAS: z
    .preprocess((v) => (typeof v === "number" ? String(v) : typeof v === "string" ? v.trim() : v), z.enum(["1", "3", "5"], { message: "must be 1, 3 or 5" }))
    .default("1")
    .transform(Number),
  BATCH_SIZE: intFrom(1, 1_000).optional(),
  RECONCILE_BUDGET_MS: intFrom(100, 900_000).default(20_000),
  LEASE_TTL_MS: intFrom(60_000, 7 * 86_400_000).default(21_600_000),
  DISPATCH_TOKEN: secret(16),
  CLAIM_SIGNING_KEY: secret(32),
  // The secrets before a rotation, accepted until removed (docs/deploy.md, "Rotating secrets").
  DISPATCH_TOKEN_PREVIOUS: secret(16).optional(),
  CLAIM_SIGNING_KEY_PREVIOUS: secret(32).optional(),
  GITEA_WEBHOOK_SECRET_PREVIOUS: optionalString,
  RUNNER_IDENTITY_KEY_PREVIOUS: optionalString,
  METRICS_TOKEN: secret(16).optional(),
  STATUS_TOKEN: secret(16).optional(),
  POD_BACKEND_URL: httpUrl.optional(),
  POD_BACKEND_TOKEN: optionalString,
  VM_BACKEND_URL: httpUrl.optional(),
  VM_BACKEND_TOKEN: optionalString,
  BACKEND_TIMEOUT_MS: intFrom(100, 120_000).default(10_000),
  EAGER_RECONCILE: z.enum(["true", "false"], { message: "must be true or false" }).default("true"),
  NATS_GATEWAY: z.enum(["on", "off"], { message: "must be on or off" }).default("on"),
  NATS_GATEWAY_SHARDS: intFrom(1, 64).default(1),
  NATS_GATEWAY_LOCATION: z.enum(LOCATION_HINTS, { message: `must be one of ${LOCATION_HINTS.join(", ")}` }).optional(),
  FORGE: z.enum(FORGES, { message: `must be one of ${FORGES.join(", ")}` }).default("gitea"),
  GITEA_URL: httpUrl.optional(),
  GITEA_WEBHOOK_SECRET: optionalString,
  GITEA_RUNNER_REGISTRATION_TOKEN: optionalString,
  GITEA_API_TOKEN: optionalString,
  GITEA_SCOPE: z
    .string()
    .regex(/^(admin|user|org:[A-Za-z0-9_.-]+|repo:[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)$/, {
      message: "must be admin, org:<name> or repo:<owner>/<name> (or user, with FORGE=forgejo)",
    })
    .default("admin"),
  RUNNER_SCOPE: z.enum(RUNNER_SCOPES, { message: `must be one of ${RUNNER_SCOPES.join(", ")}` }).default("instance"),
  FAIR_SHARE: z.enum(["on", "off"], { message: "must be on or off" }).default("on"),
  QUOTAS: z.string().optional(),
  STATUS_TOP_OWNERS: intFrom(0, 1_000).default(10),
  RUNNER_NAME_PREFIX: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,31}$/, { message: "must be 1-32 of [a-z0-9-]" })
    .default("gdr"),
  RUNS_ON_ROUTES: z.string().optional(),
  RUNNER_POOLS: z.string().optional(),
  RUNNER_IDENTITY_KEY: optionalString,
  WEBHOOK_MAX_BYTES: intFrom(1_024, 25 * 1024 * 1024).default(1024 * 1024),
  GITEA_JOB_PAGES: intFrom(0, 100).default(5),
  GITEA_VERSION: z
    .string()
    .regex(/^v?\d+\.\d+(\.\d+)?([-+][0-9A-Za-z.-]+)?$/, { message: "must be a Gitea version such as 1.26.2 (or unset: Gitea is asked)" })
    .optional(),
  CLEANUP_GRACE_MS: intFrom(0, 86_400_000).default(300_000),
  WARM_GRACE_MS: intFrom(0, 600_000).default(5_000),
  MAX_RERUNS: intFrom(0, 10).default(1),
  FORGEJO_POLL_MS: intFrom(1_000, 60_000).default(3_000),
  POD_DRIVER: z.enum(DRIVERS).default("http"),
  VM_DRIVER: z.enum(DRIVERS).default("http"),
  K8S_API_URL: httpUrl.optional(),
  K8S_TOKEN: optionalString,
  /** The hetzner driver (backends/hetzner): its API token (a secret), URL, and the runner download of a stock image. */
  HCLOUD_TOKEN: optionalString,
  HCLOUD_API_URL: httpUrl.optional(),
  HCLOUD_RUNNER_URL: optionalString,
  HCLOUD_RUNNER_SHA256: optionalString,
  /** The ec2 driver (backends/ec2): its credentials (secrets), region, endpoint, and the runner download of a stock AMI. */
  AWS_ACCESS_KEY_ID: optionalString,
  AWS_SECRET_ACCESS_KEY: optionalString,
  EC2_REGION: optionalString,
  EC2_API_URL: httpUrl.optional(),
  EC2_RUNNER_URL: optionalString,
  EC2_RUNNER_SHA256: optionalString,
  K8S_NAMESPACE: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, { message: "must be a Kubernetes namespace name" })
    .default("default"),
  RUNNER_IMAGE: z.string().min(1).default(DEFAULT_RUNNER_IMAGE),
  RUNNER_VM_IMAGE: optionalString,
  POD_TEMPLATE: optionalString,
  /** Named backends beyond pod and vm (backends/named.ts). */
  BACKENDS: z.string().optional(),
  VM_TEMPLATE: optionalString,
});
