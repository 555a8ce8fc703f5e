// Forgejo behind the Forge interface: each assignment's runner registered over REST as an
// ephemeral runner (`{id, uuid, token}`, sealed in the record like a Gitea identity), bound to its
// job by the attempt's handle; the cron tick deletes the runners of ours no assignment needs.
// Jobs are found by the poller (poller.ts), not here.
import type { Dispatcher } from "../../dispatcher-types.ts";
import { openIdentity, runnerName, sealIdentity } from "../runner-identity.ts";
import type { ForgejoRunnerIdentity, Forge } from "../types.ts";
import type { ForgejoClient } from "./client.ts";
import type { ForgejoConfig } from "./config.ts";
import { cleanForgejoRunners } from "./cleanup.ts";
import { forgejoPlace } from "./warm.ts";

export function createForgejoForge(cfg: ForgejoConfig, client: ForgejoClient, now: () => number): Forge<Dispatcher> {
  return {
    kind: "forgejo",
    async identity(assignment, labels, record, reserved) {
      const id = assignment.id;
      if (record.runner) return { identity: { forge: "forgejo", runner: await openIdentity<ForgejoRunnerIdentity>(cfg.identityKey, id, record.runner.sealed) } };
      if (!reserved) return "busy";
      // Registered at GITEA_SCOPE: a job names its repository by id only, and the handle binds the runner to its job anyway.
      const name = runnerName(cfg.runnerNamePrefix, id);
      const registered = await client.registerRunner(cfg.scope, name);
      const runner: ForgejoRunnerIdentity = { url: cfg.url, uuid: registered.uuid, token: registered.token, labels, ...(assignment.job?.handle ? { handle: assignment.job.handle } : {}) };
      const sealed = await sealIdentity(cfg.identityKey, id, runner);
      return { identity: { forge: "forgejo", runner }, ref: { id: registered.id, name, registeredAt: new Date(now()).toISOString(), sealed, place: forgejoPlace(cfg) } };
    },
    async tick(d) {
      await d.withState((state) => cleanForgejoRunners(d, client, cfg, state)).then(() => undefined).catch((err) => d.sink.error("forgejo runner cleanup failed", { reason: (err as Error).message }));
    },
    deleteRunner: (runner) => client.deleteRunner(cfg.scope, runner.id),
  };
}
