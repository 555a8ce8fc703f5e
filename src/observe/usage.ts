// Who used the runners over a time window, per owner and repository: jobs, runner seconds, and
// the time from queued to running. Read from the durable records (JetStream KV, kept for
// RECORD_TTL_MS), never from memory: any isolate answers the same. A record's last write comes
// after its job was queued, so a scan from `since` by stored time sees every job queued since.
import type { StoredMsg } from "@nats-io/jetstream";
import type { FieldIssue } from "../model/assignment.ts";
import { RECORD_PREFIX } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { whoseJob } from "../quotas/config.ts";
import { isKvValue, readBatch } from "../state/kv.ts";
import { jobRepository, type AssignmentRecord } from "../state/records.ts";

/** Records read per request, and at most per answer (truncated beyond: ask a narrower window). */
const BATCH = 500;
export const USAGE_SCAN_LIMIT = 50_000;

export interface UsageFigures {
  /** Jobs queued in the window (their assignments). */
  jobs: number;
  /** Runner time, from the runner asked of the backend to its job's end (or now, while it runs). */
  runnerSeconds: number;
  /** Queued to running (in_progress), over the jobs of the window that a runner took. */
  queuedToRunning: { count: number; meanSeconds: number | null; p50Seconds: number | null; p95Seconds: number | null };
}

export interface Usage {
  since: string;
  until: string;
  owners: (UsageFigures & { owner: string; repositories: (UsageFigures & { repository: string })[] })[];
  /** Records read; `truncated`: USAGE_SCAN_LIMIT was reached before `until`. */
  scanned: number;
  truncated: boolean;
}

/** Reads the records stored since `since` and sums those of the jobs queued in [since, until). */
export async function readUsage(handle: NatsHandle, bucket: string, since: number, until: number, now: number): Promise<Usage> {
  const subjects = `$KV.${bucket}.${RECORD_PREFIX}.>`;
  const records: AssignmentRecord[] = [];
  let scanned = 0;
  let truncated = false;
  for (let from: { start_time: string } | { seq: number } = { start_time: new Date(since).toISOString() }; ;) {
    // Nothing stored from there on is answered "message not found": an empty batch.
    const batch: StoredMsg[] = await readBatch(handle, `KV_${bucket}`, { ...from, batch: BATCH, next_by_subj: subjects }).catch((err: unknown) => {
      if (/message not found/i.test((err as Error).message)) return [] as StoredMsg[];
      throw err;
    });
    for (const m of batch) if (isKvValue(m)) records.push(m.json<AssignmentRecord>());
    scanned += batch.length;
    if (batch.length < BATCH) break;
    if (scanned >= USAGE_SCAN_LIMIT) {
      truncated = true;
      break;
    }
    from = { seq: batch.at(-1)!.seq + 1 };
  }
  return { ...summarizeUsage(records, since, until, now), scanned, truncated };
}

/**
 * Sums per owner and repository. A runner that ran another job than its own (a warm runner, or one
 * whose job another runner took first: `took`) counts to the job it ran; a Forgejo warm runner
 * given a job (`bound`) is that job, queued when it was given (its queued-to-running time is not
 * known: not counted); a warm runner that ran none counts to `-`, as do jobs with no repository.
 */
export function summarizeUsage(records: readonly AssignmentRecord[], since: number, until: number, now: number): Omit<Usage, "scanned" | "truncated"> {
  const byId = new Map(records.map((r) => [r.id, r]));
  const queuedAt = (r: AssignmentRecord) => Date.parse(r.bound?.at ?? r.createdAt);
  const inWindow = (r: AssignmentRecord | undefined) => r !== undefined && !r.tombstone && queuedAt(r) >= since && queuedAt(r) < until;
  const rows = new Map<string, { jobs: number; seconds: number; waits: number[] }>();
  const row = (repository: string) => rows.get(repository) ?? rows.set(repository, { jobs: 0, seconds: 0, waits: [] }).get(repository)!;
  const where = (r: AssignmentRecord) => whoseJob(jobRepository(r)).repository;
  for (const r of records) {
    // A Forgejo job moved to a warm runner (movedTo) is counted once: as that runner's `bound`.
    const isJob = (r.job !== undefined && r.movedTo === undefined) || r.bound !== undefined;
    if (inWindow(r) && isJob) row(where(r)).jobs++;
    const ran = r.took ? byId.get(r.took) : isJob ? r : undefined;
    if (r.askedAt) {
      // Counted with the job it ran, when that job is in the window; else with its own.
      const to = ran && inWindow(ran) ? ran : r;
      if (inWindow(to)) {
        const end = r.completedAt ?? r.terminatedAt ?? new Date(now).toISOString();
        row(where(to)).seconds += Math.max(0, Date.parse(end) - Date.parse(r.askedAt)) / 1_000;
      }
    }
    if (r.claimedAt && ran && !ran.bound && inWindow(ran)) row(where(ran)).waits.push(Math.max(0, Date.parse(r.claimedAt) - Date.parse(ran.createdAt)) / 1_000);
  }
  const owners = new Map<string, Usage["owners"][number]>();
  for (const [repository, r] of [...rows].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const owner = repository.split("/")[0]!;
    const o = owners.get(owner) ?? owners.set(owner, { owner, ...figures(0, 0, []), repositories: [] }).get(owner)!;
    o.repositories.push({ repository, ...figures(r.jobs, r.seconds, r.waits) });
  }
  for (const o of owners.values()) {
    const all = o.repositories;
    Object.assign(
      o,
      figures(
        sum(all.map((r) => r.jobs)),
        sum(all.map((r) => r.runnerSeconds)),
        [...all].flatMap((r) => rows.get(r.repository)!.waits),
      ),
    );
  }
  const list = [...owners.values()].sort((a, b) => b.runnerSeconds - a.runnerSeconds || (a.owner < b.owner ? -1 : 1));
  return { since: new Date(since).toISOString(), until: new Date(until).toISOString(), owners: list };
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const round = (x: number) => Math.round(x * 1000) / 1000;

function figures(jobs: number, seconds: number, waits: number[]): UsageFigures {
  const sorted = [...waits].sort((a, b) => a - b);
  const at = (q: number) => (sorted.length ? round(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!) : null);
  return {
    jobs,
    runnerSeconds: round(seconds),
    queuedToRunning: {
      count: sorted.length,
      meanSeconds: sorted.length ? round(sum(sorted) / sorted.length) : null,
      p50Seconds: at(0.5),
      p95Seconds: at(0.95),
    },
  };
}

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The window of `GET /v1/usage`: RFC 3339 times; `until` defaults to now, `since` to a day
 * before `until`. Problems name their field: a window must start before it ends, and not before
 * the records kept (`keptMs` back from now), whose jobs could no longer be counted.
 */
export function usageWindow(
  query: { since?: string | undefined; until?: string | undefined },
  now: number,
  keptMs: number,
): { since: number; until: number } | FieldIssue[] {
  const issues: FieldIssue[] = [];
  const time = (field: "since" | "until") => {
    const raw = query[field];
    if (raw === undefined) return undefined;
    const ok = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(raw) && !Number.isNaN(Date.parse(raw));
    if (!ok) issues.push({ field, message: "must be an RFC 3339 time, such as 2026-12-01T00:00:00Z" });
    return ok ? Date.parse(raw) : undefined;
  };
  const until = time("until") ?? now;
  const since = time("since") ?? until - DAY_MS;
  if (issues.length) return issues;
  if (since >= until) issues.push({ field: "since", message: "must be before until" });
  if (since < now - keptMs)
    issues.push({
      field: "since",
      message: `must be within the ${Math.round(keptMs / DAY_MS)} days records are kept (after ${new Date(now - keptMs).toISOString()})`,
    });
  return issues.length ? issues : { since, until };
}
