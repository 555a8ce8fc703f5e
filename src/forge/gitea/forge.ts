// Gitea behind the Forge interface: registration over the runner protocol with a registration
// token (identity.ts), the sweep for missed webhooks and stale runners (sweep.ts), and runner
// deletion over REST. Behaviour is what the dispatcher did itself before Forgejo joined.
import type { Context } from "../../domain/context.ts";
import type { Forge } from "../../domain/forge.ts";
import type { GiteaClient } from "./client.ts";
import type { GiteaConfig } from "./config.ts";
import { obtainRunnerIdentity } from "./identity.ts";
import { listedBy, parseScope, registrationScope, scopeKey, warmScopeKey } from "./scope.ts";
import { sweepGitea } from "./sweep.ts";
import { keepClient } from "./client-of.ts";
import { giteaLaunch } from "./launch.ts";
import { stillWaiting } from "./stale.ts";
import { giteaReruns } from "./reruns.ts";
import { forEachPage } from "../pages.ts";
import { giteaRelease } from "./release.ts";
import { consoleSink } from "../../model/events.ts";

export function createGiteaForge(cfg: GiteaConfig, gitea: GiteaClient, now: () => number): Forge<Context> {
  return keepClient<Forge<Context>>(gitea, {
    kind: "gitea",
    async identity(assignment, labels, record, reserved, pool) {
      // A warm runner has no job to follow: it is registered where its pool says (config.ts checks one is said).
      const scope = pool?.scope ? parseScope(pool.scope) : registrationScope(record.warm ? "instance" : cfg.runnerScope, cfg.scope, assignment.job?.repository);
      const identity = await obtainRunnerIdentity(cfg, gitea, { ...assignment, labels }, record, reserved, now, scope);
      if (identity.kind === "busy") return "busy";
      return { identity: { forge: "gitea", file: identity.file }, ...(identity.ref ? { ref: identity.ref } : {}) };
    },
    async tick(d) {
      await d.withState((state) => sweepGitea(d, gitea, state)).catch((err) => d.sink.error("gitea sweep failed", { reason: (err as Error).message }));
    },
    runnerFields: (identity, input) => (identity.forge === "gitea" ? { runner: identity.file, launch: giteaLaunch(identity.file, input) } : {}),
    deleteRunner: (runner) => gitea.deleteRunner(runner),
    runners: {
      get: (runner) => gitea.getRunner(runner),
      disable: (runner) => gitea.disableRunner(runner),
      list: cfg.apiToken && cfg.jobPages > 0 ? (scope) => listAll(gitea, cfg.jobPages, scope) : undefined,
    },
    // Webhooks bring the jobs; the sweep finds what they missed.
    polled: false,
    listsAtHome: (scope) => listedBy(cfg.scope, scope),
    // A runner of one repository (RUNNER_SCOPE) would wait for that repository's jobs alone.
    fitsWarm: (scope, poolScope) => (scope ?? scopeKey(cfg.scope)) === warmScopeKey(poolScope, cfg.scope),
    jobWaiting: cfg.apiToken ? async (repository, id) => stillWaiting((await gitea.getJob(repository, id))?.status ?? "queued") : undefined,
    reruns: cfg.apiToken ? giteaReruns(gitea, () => giteaRelease({ config: { gitea: cfg }, now, sink: consoleSink }, gitea)) : undefined,
    runLink: (repository, run) => `${cfg.url}/${repository}/actions/runs/${run}`,
  });
}

const PAGE = 50;

/** Ids of the runners Gitea lists at `scope`; undefined when the list is longer than `pages` pages. */
async function listAll(gitea: GiteaClient, pages: number, scope: string | undefined): Promise<Set<number> | undefined> {
  const listed = new Set<number>();
  const complete = await forEachPage(
    (page) => gitea.listRunners(page, PAGE, scope),
    pages,
    (runners) => runners.forEach((r) => listed.add(r.id)),
  );
  return complete ? listed : undefined;
}
