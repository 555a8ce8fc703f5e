// Forgejo behind the Forge interface: each assignment's runner registered over REST as an
// ephemeral runner (`{id, uuid, token}`, sealed in the record like a Gitea identity), bound to its
// job by the attempt's handle; the cron tick deletes the runners of ours no assignment needs.
// Jobs are found by the poller (poller.ts), not here.
//
// A job's runner is registered at the job's repository, so that its credentials can never reach
// another repository's jobs (the handle binds it to its one job; the scope bounds what it sees);
// where the token may not (403, 404), or the repository's name is not known (ids only), at
// GITEA_SCOPE, said once per repository. A warm runner, made before its job, is registered at
// GITEA_SCOPE. The record keeps where (RunnerRef.scope, as GITEA_SCOPE is written) when that is
// not GITEA_SCOPE: deletion and lookups go there.
import type { Context } from "../../domain/context.ts";
import type { EventSink } from "../../model/events.ts";
import { openIdentity, runnerName, sealIdentity } from "../../domain/runner-identity.ts";
import type { ForgejoRunnerIdentity, Forge } from "../../domain/forge.ts";
import { ForgejoError, type ForgejoClient, type ForgejoScope } from "./client.ts";
import { repositoryScope, runnerScope, type ForgejoConfig } from "./config.ts";
import { cleanForgejoRunners } from "./cleanup.ts";
import { forgejoPlace } from "./warm.ts";
import { forgejoLaunch } from "./launch.ts";

const scopeText = (s: ForgejoScope & { kind: "repo" }) => `repo:${s.owner}/${s.repo}`;
const sameScope = (a: ForgejoScope, b: ForgejoScope) => JSON.stringify(a) === JSON.stringify(b);

/** Where the token may not register a runner (by URL and repository), until when: not asked again, nor said again, meanwhile. */
const refused = new Map<string, number>();
/** A refusal is believed this long: rights granted later are used within minutes. */
const REFUSED_FOR_MS = 10 * 60_000;

export function createForgejoForge(cfg: ForgejoConfig, client: ForgejoClient, now: () => number, sink?: EventSink): Forge<Context> {
  /** Registers at the job's repository where it can; else at GITEA_SCOPE. */
  const register = async (repository: string | undefined, name: string, id: string) => {
    const at = repositoryScope(repository);
    const key = at && `${cfg.url} ${scopeText(at)}`;
    if (at && key && !sameScope(at, cfg.scope) && (refused.get(key) ?? 0) <= now()) {
      try {
        return { registered: await client.registerRunner(at, name), scope: scopeText(at) };
      } catch (err) {
        if (!(err instanceof ForgejoError) || (err.status !== 403 && err.status !== 404)) throw err;
        // Registrations at once each meet the refusal: the first to hear it says so.
        const said = (refused.get(key) ?? 0) > now();
        refused.set(key, now() + REFUSED_FOR_MS);
        if (!said)
          sink?.event({
            event: "registered_at_scope",
            assignment: id,
            backend: undefined,
            reason: `Forgejo refused a runner at ${scopeText(at)} (${err.status}): this repository's runners are registered at GITEA_SCOPE for a while`,
          });
      }
    }
    return { registered: await client.registerRunner(cfg.scope, name) };
  };
  return {
    kind: "forgejo",
    async identity(assignment, labels, record, reserved) {
      const id = assignment.id;
      if (record.runner)
        return {
          identity: { forge: "forgejo", runner: await openIdentity<ForgejoRunnerIdentity>(cfg.identityKey, id, record.runner.sealed, cfg.previousIdentityKey) },
        };
      if (!reserved) return "busy";
      const name = runnerName(cfg.runnerNamePrefix, id);
      const { registered, scope } = await register(assignment.job?.repository, name, id);
      const runner: ForgejoRunnerIdentity = {
        url: cfg.url,
        uuid: registered.uuid,
        token: registered.token,
        labels,
        ...(assignment.job?.handle ? { handle: assignment.job.handle } : {}),
      };
      const sealed = await sealIdentity(cfg.identityKey, id, runner);
      const place = forgejoPlace({ url: cfg.url, scope: runnerScope(cfg, { scope }) });
      return {
        identity: { forge: "forgejo", runner },
        ref: { id: registered.id, name, registeredAt: new Date(now()).toISOString(), sealed, place, ...(scope ? { scope } : {}) },
      };
    },
    async tick(d) {
      await d
        .withState((state) => cleanForgejoRunners(d, client, cfg, state))
        .then(() => undefined)
        .catch((err) => d.sink.error("forgejo runner cleanup failed", { reason: (err as Error).message }));
    },
    runnerFields(identity, { handleUrl, ...input }) {
      if (identity.forge !== "forgejo") return {};
      // A runner without a job (warm) asks for its handle (warm.ts).
      const asks = identity.runner.handle ? {} : { handleUrl };
      return { forgejo: identity.runner, ...asks, launch: forgejoLaunch(identity.runner, { ...input, ...asks }) };
    },
    deleteRunner: (runner) => client.deleteRunner(runnerScope(cfg, runner), runner.id),
    // Forgejo says of no runner whether it runs a task: busy runners are found by their claims.
    runners: undefined,
    // A job of a concurrency group (cancel-in-progress false) is listed waiting but not handed out
    // while an earlier run of its group holds it (getConcurrencyCondition, models/actions/task.go:253-291
    // at v15.0.3): while Forgejo still lists it waiting for its handle and its runner polls (not
    // "offline": heard within RunnerOfflineTime, a minute, models/actions/runner.go:73,104-112), that
    // runner is kept, to take it when the group frees.
    async claimHeld(job, runner) {
      const seen = await client.getRunner(runnerScope(cfg, runner), runner.id);
      if (!seen?.status || seen.status === "offline") return undefined;
      const listed = (await client.jobs(cfg.scope)).find((j) => j.id === job.id);
      const waiting = listed?.status === "waiting" && (listed.task_id ?? 0) === 0 && (!job.handle || listed.handle === job.handle);
      return waiting
        ? `Forgejo still lists job ${job.id} waiting and its runner polls (${seen.status}): it waits its turn (a concurrency group), so its runner is kept`
        : undefined;
    },
    polled: true,
    // Its cleanup lists GITEA_SCOPE: a runner registered at its job's repository is not there.
    listsAtHome: (scope) => scope === undefined,
    // Warm runners are registered at GITEA_SCOPE, where every job's runner may be, and a job
    // goes to a warm runner only after the poller matched its place (warm.ts).
    fitsWarm: () => true,
  };
}
