// Gitea behind the Forge interface: registration over the runner protocol with a registration
// token (identity.ts), the sweep for missed webhooks and stale runners (sweep.ts), and runner
// deletion over REST. Behaviour is what the dispatcher did itself before Forgejo joined.
import type { Dispatcher } from "../../domain/context.ts";
import type { Forge } from "../../domain/forge.ts";
import type { GiteaClient } from "./client.ts";
import type { GiteaConfig } from "./config.ts";
import { obtainRunnerIdentity } from "./identity.ts";
import { parseScope, registrationScope } from "./scope.ts";
import { sweepGitea } from "./sweep.ts";

export function createGiteaForge(cfg: GiteaConfig, gitea: GiteaClient, now: () => number): Forge<Dispatcher> {
  return {
    kind: "gitea",
    async identity(assignment, labels, record, reserved, pool) {
      // A warm runner has no job to follow: it is registered where its pool says (config.ts checks one is said).
      const scope = pool?.scope ? parseScope(pool.scope) : registrationScope(record.warm ? "instance" : cfg.runnerScope, cfg.scope, assignment.job?.repository);
      const identity = await obtainRunnerIdentity(cfg, gitea, { ...assignment, labels }, record, reserved, now, scope);
      if (identity.kind === "busy") return "busy";
      return { identity: { forge: "gitea", file: identity.file }, ...(identity.ref ? { ref: identity.ref } : {}) };
    },
    async tick(d) {
      await d.withState((state) => sweepGitea(d, state)).catch((err) => d.sink.error("gitea sweep failed", { reason: (err as Error).message }));
    },
    deleteRunner: (runner) => gitea.deleteRunner(runner),
  };
}
