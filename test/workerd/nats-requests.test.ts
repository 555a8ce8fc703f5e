// NATS operations per assignment, counted by a WebSocket proxy in front of the nats-server
// (client PUB/HPUB frames: publishes, requests and acks). Deterministic, so asserted.
import { written } from "../harness/memory.ts";
import { expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { handleWorkflowJob, parseWorkflowJob } from "../../src/forge/gitea/webhook.ts";
import { giteaTestEnv, provisionEnv, uniqueName } from "../harness/env.ts";
import { captureLogs, sleep } from "../harness/worker.ts";
import { queuedFixture } from "../harness/fixtures.ts";

const proxy = inject("natsProxyUrl");
const counts = async (tag: string) => (await (await fetch(`${proxy.replace("ws://", "http://")}/_counts/${tag}`)).json()) as { pub: number; request: number };

// Fair share adds per pass: whether anybody waits (one direct get, by a batch that admits), and
// the wait set's heads at the end of the pass (one batch direct get): 2 more. A new runner's
// registration is stored before the backend is asked (so that a job ended meanwhile gets no
// workload); a backend that answers "ready" at once, rather than "pending" as a Pod or a VM just
// created does, costs one more write for that answer.
it.each([
  ["off", 2, "pending", 4],
  ["on", 4, "pending", 4],
  ["off", 2, "ready", 5],
])(
  "≤ 2 per new webhook; per reconciled assignment plus a few per pass (FAIR_SHARE=%s: ≤ %i; backend first answers %s: ≤ %i), JIT registration included",
  async (fairShare, passOps, firstAnswer, assignmentOps) => {
    const logs = captureLogs();
    try {
      const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { RETRY_DELAY_MS: 30, CAPACITY_POD: 50, FAIR_SHARE: fairShare });
      await provisionEnv(env);
      await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: firstAnswer === "pending" ? 1 : 0 }) });
      const via = (tag: string) => createDispatcher({ config: loadConfig({ ...env, NATS_URL: `${proxy}/${tag}` }) });
      /** Ops of N webhooks, and of a provisioning pass plus an acking pass over them. */
      const measure = async (n: number, first: number) => {
        const tags = { webhook: uniqueName("wh"), provision: uniqueName("rc"), ack: uniqueName("ack") };
        const hooks = via(tags.webhook);
        for (let i = 0; i < n; i++) {
          const payload = structuredClone(queuedFixture);
          payload.workflow_job.id = first + i;
          await handleWorkflowJob(hooks, parseWorkflowJob(payload));
        }
        const summaries = await via(tags.provision).reconcile("test", 10_000);
        expect(summaries[0]).toMatchObject({ fetched: n, naked: n });
        await via("setup").withState(async ({ records }) => {
          for (let i = 0; i < n; i++) await records.update(`gitea-${first + i}-1`, (r) => written({ ...r, state: "claimed" }));
        });
        await sleep(50);
        expect((await via(tags.ack).reconcile("test", 10_000))[0]).toMatchObject({ fetched: n, acked: n });
        return { webhook: (await counts(tags.webhook)).pub, passes: (await counts(tags.provision)).pub + (await counts(tags.ack)).pub };
      };
      const small = await measure(10, 5000);
      const large = await measure(30, 6000);
      // Two sizes split the passes' ops into a share per assignment and a fixed part per pass.
      const perAssignment = (large.passes - small.passes) / 20;
      const perPass = (small.passes - 10 * perAssignment) / 2;
      expect(small.webhook / 10).toBeLessThanOrEqual(2); // a new job: create its record, publish
      expect(large.webhook / 30).toBeLessThanOrEqual(2);
      // Take the slot (its registration reservation rides along), store the registration (and the
      // backend's "ready"), nak; then ack.
      expect(perAssignment).toBeLessThanOrEqual(assignmentOps);
      expect(perPass).toBeLessThanOrEqual(passOps); // the pull, the batch read of the records
    } finally {
      logs.restore();
    }
  },
);
