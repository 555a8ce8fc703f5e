// NATS operations per assignment, counted by a WebSocket proxy in front of the nats-server
// (client PUB/HPUB frames: publishes, requests and acks). Deterministic, so asserted.
import { expect, inject, it } from "vitest";
import { loadConfig } from "../../src/config.ts";
import { createDispatcher } from "../../src/dispatcher.ts";
import { handleWorkflowJob, parseWorkflowJob } from "../../src/gitea/webhook.ts";
import { giteaTestEnv, provisionEnv, uniqueName } from "../harness/env.ts";
import { captureLogs, sleep } from "../harness/worker.ts";
import { queuedFixture } from "../harness/fixtures.ts";

const proxy = inject("natsProxyUrl");
const counts = async (tag: string) => (await (await fetch(`${proxy.replace("ws://", "http://")}/_counts/${tag}`)).json()) as { pub: number; request: number };

it("≤ 2 per new webhook and ≤ 4 per reconciled assignment, JIT registration included", async () => {
  const logs = captureLogs();
  try {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { RETRY_DELAY_MS: 30, CAPACITY_POD: 50 });
    await provisionEnv(env);
    const via = (tag: string) => createDispatcher({ config: loadConfig({ ...env, NATS_URL: `${proxy}/${tag}` }) });
    const tags = { webhook: uniqueName("wh"), provision: uniqueName("rc"), ack: uniqueName("ack") };
    const N = 20;
    const hooks = via(tags.webhook);
    for (let i = 0; i < N; i++) {
      const payload = structuredClone(queuedFixture);
      payload.workflow_job.id = 5000 + i;
      await handleWorkflowJob(hooks, parseWorkflowJob(payload));
    }
    const perWebhook = (await counts(tags.webhook)).pub / N;

    const summaries = await via(tags.provision).reconcile("test", 10_000);
    expect(summaries[0]).toMatchObject({ fetched: N, naked: N });
    await via("setup").withState(async ({ records }) => {
      for (let i = 0; i < N; i++) await records.update(`gitea-${5000 + i}-1`, (r) => ({ ...r, state: "claimed" }));
    });
    await sleep(50);
    expect((await via(tags.ack).reconcile("test", 10_000))[0]).toMatchObject({ fetched: N, acked: N });
    const perReconciled = ((await counts(tags.provision)).pub + (await counts(tags.ack)).pub) / N;

    expect(perWebhook).toBeLessThanOrEqual(2); // a new job: create its record, publish (the goal is 3)
    expect(perReconciled).toBeLessThanOrEqual(4);
  } finally {
    logs.restore();
  }
});
