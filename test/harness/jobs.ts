// Shared by the load and fault suites: Gitea job payloads, signed deliveries, bounded concurrency.
import { giteaSignature } from "../../src/gitea/signature.ts";
import { TEST_SECRETS } from "./env.ts";
import { request } from "./worker.ts";

type Fixture = { workflow_job: { id: number } };

/** A copy of a fixture for another job id, with `extra` merged into its workflow_job. */
export function withJob<T extends Fixture>(fixture: T, job: number, extra: Record<string, unknown> = {}): T {
  const p = structuredClone(fixture);
  p.workflow_job.id = job;
  Object.assign(p.workflow_job, extra);
  return p;
}

/** Delivers a signed workflow_job webhook as Gitea does; the whole answer, read. */
export async function deliverJob(env: Record<string, string>, payload: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const raw = JSON.stringify(payload);
  const signature = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw));
  const res = await request(env, "/v1/gitea/webhook", {
    method: "POST",
    headers: { "content-type": "application/json", "x-gitea-event-type": "workflow_job", "x-gitea-signature": signature },
    body: raw,
  });
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text);
  } catch {
    body = { text };
  }
  return { status: res.status, body };
}

/** Runs `fn` over `items` with `concurrency` at once. */
export async function inParallel<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) await fn(items[next++]!);
  }));
}
