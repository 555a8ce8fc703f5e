// Shared by the load and fault suites: Gitea job payloads, signed deliveries, bounded concurrency.
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { TEST_SECRETS } from "./env.ts";
import { answerMs, bearer, request } from "./worker.ts";

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
  const { answerMs: _, ...answer } = await deliverJobTimed(env, payload);
  return answer;
}

/** deliverJob, with the milliseconds until the answer (background work apart). */
export async function deliverJobTimed(
  env: Record<string, string>,
  payload: unknown,
): Promise<{ status: number; body: Record<string, unknown>; answerMs: number }> {
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
  return { status: res.status, body, answerMs: answerMs(res) };
}

/** Runs `fn` over `items` with `concurrency` at once. */
export async function inParallel<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

export interface JobView {
  state: string;
  giteaRunnerId: number | null;
}

/** GET /v1/assignments/:id of each id, 8 at once: the view, or the status when not 200. */
export async function assignmentViews(env: Record<string, string>, ids: string[]): Promise<Map<string, JobView | number>> {
  const out = new Map<string, JobView | number>();
  await inParallel(ids, 8, async (id) => {
    const res = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
    out.set(id, res.status === 200 ? ((await res.json()) as JobView) : res.status);
  });
  return out;
}

/** The state of each id's assignment, or "http <status>". */
export async function assignmentStates(env: Record<string, string>, ids: string[]): Promise<string[]> {
  return [...(await assignmentViews(env, ids)).values()].map((v) => (typeof v === "number" ? `http ${v}` : v.state));
}
