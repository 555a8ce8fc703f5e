// The Forgejo runner's cache proxy signs each request it forwards (forgejo-runner
// act/artifactcache/mac.go, at 0988a0cb): MAC = hex(HMAC-SHA256(secret, repo ">" runId ">"
// timestamp ">" writeIsolationKey)), from the headers Forgejo-Cache-Repo, -RunNumber (the run's
// id), -Timestamp (Unix seconds on the runner's clock, once at job start) and
// -WriteIsolationKey (absent = ""). Forgejo's server refuses a timestamp after its own now and
// then compares the hex in constant time; so does this one, with a minute's grace for a runner's clock.
// The secret is the job's own (secrets.ts), so a MAC is good for one job and no other.
import { timingSafeEqual } from "../model/crypto.ts";

export const HEADERS = {
  repo: "Forgejo-Cache-Repo",
  run: "Forgejo-Cache-RunNumber",
  timestamp: "Forgejo-Cache-Timestamp",
  isolationKey: "Forgejo-Cache-WriteIsolationKey",
  mac: "Forgejo-Cache-MAC",
} as const;

/** How far ahead of the Worker's clock a runner's may be. */
export const CLOCK_GRACE_S = 60;

const encoder = new TextEncoder();

export async function forgejoMac(secret: string | Uint8Array, repo: string, runId: string, timestamp: string, isolationKey: string): Promise<string> {
  const raw = typeof secret === "string" ? encoder.encode(secret) : secret;
  const key = await crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, encoder.encode(`${repo}>${runId}>${timestamp}>${isolationKey}`));
  return [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** What a signed request says of its job, once its MAC holds. */
export interface Signed {
  repo: string;
  runId: string;
  isolationKey: string;
}

/** Why a request is refused (each a 403, as Forgejo answers "validation error"). */
export type MacRefusal = "missing" | "timestamp" | "mac";

/** The request's signed facts under `secret`, or why they do not hold. `now` in epoch ms. */
export async function verifyForgejoMac(headers: Headers, secret: string | Uint8Array, now: number): Promise<Signed | MacRefusal> {
  const repo = headers.get(HEADERS.repo);
  const runId = headers.get(HEADERS.run);
  const timestamp = headers.get(HEADERS.timestamp);
  const mac = headers.get(HEADERS.mac);
  if (!repo || !runId || !timestamp || !mac) return "missing";
  if (!/^\d{1,15}$/.test(timestamp) || Number(timestamp) > Math.floor(now / 1000) + CLOCK_GRACE_S) return "timestamp";
  const isolationKey = headers.get(HEADERS.isolationKey) ?? "";
  const expected = await forgejoMac(secret, repo, runId, timestamp, isolationKey);
  return (await timingSafeEqual(mac, expected)) ? { repo, runId, isolationKey } : "mac";
}
