// The cron side of the Forgejo integration: runners of ours (named RUNNER_NAME_PREFIX-<assignment>)
// that no assignment needs are deleted, with the rule Gitea's sweep keeps (cleanupVerdict).
// Runners Forgejo no longer knows are the poller's to find (poller.ts): their jobs left the list.
import type { Dispatcher, State } from "../../dispatcher-types.ts";
import type { Backend } from "../../names.ts";
import { assignmentOfRunner } from "../gitea/identity.ts";
import { cleanRunner, eachItem } from "../gitea/sweep.ts";
import type { ForgejoClient } from "./client.ts";
import type { ForgejoConfig } from "./config.ts";

const PAGE_LIMIT = 50;
/** Pages one tick reads at most: 1,000 runners of the scope. */
const MAX_PAGES = 20;

export async function cleanForgejoRunners(d: Dispatcher, client: ForgejoClient, cfg: ForgejoConfig, { records, admission }: State): Promise<number> {
  const summary = { runnersDeleted: 0 };
  const reservations = new Map<Backend, Promise<Set<string>>>();
  const registering = (backend: Backend) => {
    if (!reservations.has(backend)) reservations.set(backend, admission.registering(backend).then((ids) => new Set(ids)));
    return reservations.get(backend)!;
  };
  const context = { d, records, admission, registering, summary, graceMs: cfg.cleanupGraceMs, deleteRunner: (at: { id: number }) => client.deleteRunner(cfg.scope, at.id) };
  for (let page = 1; page <= MAX_PAGES; page++) {
    const runners = await client.listRunners(cfg.scope, page, PAGE_LIMIT);
    for (const runner of runners) {
      const id = assignmentOfRunner(cfg.runnerNamePrefix, runner.name);
      if (id) await eachItem(d, `runner ${runner.id}`, () => cleanRunner(context, runner.id, id));
    }
    if (runners.length < PAGE_LIMIT) break;
  }
  return summary.runnersDeleted;
}
