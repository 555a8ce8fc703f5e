// The cron side of the Forgejo integration, both ways:
// - a runner of ours in Forgejo (named RUNNER_NAME_PREFIX-<assignment>) that no assignment needs is
//   deleted there, with the rule Gitea's sweep keeps too (runner-cleanup.ts);
// - a runner an assignment still waits on that Forgejo no longer has (an administrator deleted it,
//   Forgejo's own cleanup did) can run nothing: its workload is torn down and its identity
//   forgotten, so that the job's next delivery registers afresh. Jobs that ended are the poller's.
// At an idle instance (no runner of ours held) the list is read every IDLE_EVERY_MINUTES only, so
// that polling stays the one request per period.
import type { BackendAccess, Basics, ForgeAccess, Settings, State, StoreAccess } from "../../domain/context.ts";
import type { Backend } from "../../nats/names.ts";
import { ASKED_FOR } from "../../model/states.ts";
import { releaseRunner } from "../../domain/teardown.ts";
import { placementOf, runnerAt, type AssignmentRecord } from "../../state/records.ts";
import { forgetRunner } from "../../state/transitions.ts";
import { runnerScope } from "./config.ts";
import { assignmentOfRunner } from "../../domain/runner-identity.ts";
import { cleanRunner, eachItem } from "../runner-cleanup.ts";
import { forEachPage } from "../pages.ts";
import type { ForgejoClient, ListedRunner } from "./client.ts";
import type { ForgejoConfig } from "./config.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings<"backends" | "claimTimeoutMs" | "pools">;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records">;

const PAGE_LIMIT = 50;
/** Pages one tick reads at most: 1,000 runners of the scope. */
const MAX_PAGES = 20;
export const IDLE_EVERY_MINUTES = 10;
const WAITING_ON_RUNNER = ASKED_FOR;

export interface CleanupSummary {
  listed: boolean;
  deleted: number;
  forgotten: number;
}

export async function cleanForgejoRunners(d: Deps, client: ForgejoClient, cfg: ForgejoConfig, state: Stores): Promise<CleanupSummary> {
  const { records, admission } = state;
  const summary: CleanupSummary = { listed: false, deleted: 0, forgotten: 0 };
  const snapshots = await Promise.all(d.config.backends.map(async ({ backend }) => ({ backend, ...(await admission.snapshot(backend)) })));
  const held = await records.getMany(snapshots.flatMap((s) => s.holders));
  const withRunner = [...held.values()].map((v) => v.value).filter((r) => r.runner !== undefined);
  if (!withRunner.length && new Date(d.now()).getUTCMinutes() % IDLE_EVERY_MINUTES !== 0) return summary;

  const registering = (backend: Backend) => Promise.resolve(new Set(snapshots.find((s) => s.backend === backend)?.registering ?? []));
  const counted = { runnersDeleted: 0 };
  const context = {
    d,
    records,
    admission,
    registering,
    summary: counted,
    graceMs: cfg.cleanupGraceMs,
    deleteRunner: (at: { id: number }) => client.deleteRunner(cfg.scope, at.id),
  };
  const listed: ListedRunner[] = [];
  // Until Forgejo says it is done: its pages may be shorter than asked (MAX_RESPONSE_ITEMS).
  const complete = await forEachPage(
    (page) => client.listRunners(cfg.scope, page, PAGE_LIMIT),
    MAX_PAGES,
    (runners) => void listed.push(...runners),
  );
  summary.listed = true;
  for (const runner of listed) {
    const id = assignmentOfRunner(cfg.runnerNamePrefix, runner.name);
    if (id) await eachItem(d, `runner ${runner.id}`, () => cleanRunner(context, runner.id, id));
  }
  summary.deleted = counted.runnersDeleted;
  // Absence is looked into only from a whole list, and then asked of Forgejo runner by runner.
  if (!complete) return summary;
  const present = new Set(listed.map((r) => r.id));
  for (const r of withRunner) {
    const stale = WAITING_ON_RUNNER.has(r.state) && !present.has(r.runner!.id) && d.now() - Date.parse(r.runner!.registeredAt) > cfg.cleanupGraceMs;
    if (!stale) continue;
    await eachItem(d, `assignment ${r.id}`, async () => {
      // A list read page by page can skip a runner (one deleted between two reads shifts the
      // rest): only Forgejo's answer for this runner says it is gone.
      if ((await client.getRunner(runnerScope(cfg, runnerAt(r)!), r.runner!.id)) !== null) return;
      if (await forgetGone(d, state, r)) summary.forgotten++;
    });
  }
  return summary;
}

/** Tears down the workload of a runner Forgejo no longer has and forgets its identity; its slot goes too. */
async function forgetGone(d: Deps, { records, admission }: Stores, seen: AssignmentRecord): Promise<boolean> {
  const forgot = await forgetRunner(records, seen.id, seen.runner!.id, (r) => WAITING_ON_RUNNER.has(r.state));
  if (!forgot.changed) return false;
  const place = placementOf(seen);
  await admission.release(place, seen.id);
  await releaseRunner(d, seen.id, place.backend, undefined);
  d.sink.event({
    event: "runner_deleted",
    assignment: seen.id,
    backend: place.backend,
    reason: "Forgejo no longer has its runner: its workload is torn down, and its job gets a new one",
  });
  return true;
}
