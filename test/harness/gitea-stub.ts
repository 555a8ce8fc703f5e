// An in-memory GiteaClient, for tests that drive the dispatcher from Node without the fake Gitea
// server: every registration succeeds at GITEA_SCOPE admin and is counted; the lists are empty.
import type { GiteaClient } from "../../src/forge/gitea/client.ts";

/** `registerMs`: how long each registration takes (for races between concurrent registrations). */
export function stubGitea({ registerMs = 0 } = {}): GiteaClient & { registrations: number } {
  const gitea: GiteaClient & { registrations: number } = {
    registrations: 0,
    registrationToken: async () => ({ token: "reg", scope: { kind: "admin" } }),
    async register(req) {
      const n = ++gitea.registrations;
      if (registerMs) await new Promise((r) => setTimeout(r, registerMs));
      return { id: n, uuid: `u${n}`, token: `t${n}`, name: req.name, labels: req.labels, scope: { kind: "admin" } };
    },
    listQueuedJobs: async () => ({ total: 0, items: [] }),
    listRunners: async () => ({ total: 0, items: [] }),
    getJob: async () => null,
    getRun: async () => null,
    rerunJob: async () => ({ refused: 404 }),
    version: async () => "1.27.0",
    listRunJobs: async () => null,
    deleteRunner: async () => undefined,
    getRunner: async () => null,
    disableRunner: async () => false,
  };
  return gitea;
}
