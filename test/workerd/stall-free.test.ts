// Fair share under a short budget and a failing backend, for a couple of minutes, with jobs
// arriving in bursts from four repositories (FAIR_SHARE=on, capacity 3): RECONCILE_BUDGET_MS at
// the schema's floor leaves turns out of budget, and a fifth of the backend's calls fail (a
// turn's failure gives its slot back and the job waits again). Sampled every second, no slot is
// held longer than ACK_WAIT_MS and a pass by a job whose runner nobody asked for; at the end every
// job ran once, every slot is free, and the wait set matches the records: nobody waits.
import { expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { loadConfig } from "../../src/app/config.ts";
import { UNADMITTED_STATES } from "../../src/nats/names.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { assignmentStates } from "../harness/jobs.ts";
import { backendControl, giteaControl, sleep, tick } from "../harness/worker.ts";

const ACK_WAIT_MS = 10_150;
const BURSTS = Number(globalThis.process?.env?.STALL_BURSTS ?? 16);
const REPOSITORIES = ["a/one", "b/two", "c/three", "d/four"];

it(
  `${BURSTS} bursts of ${REPOSITORIES.length} jobs, RECONCILE_BUDGET_MS 150, a fifth of the backend's calls failing: no slot stalls, every job runs once, nobody is left waiting`,
  { timeout: 300_000 },
  async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), {
      FAIR_SHARE: "on",
      CAPACITY_POD: 3,
      RECONCILE_BUDGET_MS: 150,
      ACK_WAIT_MS,
      RETRY_DELAY_MS: 300,
      BACKEND_TIMEOUT_MS: 500,
      RUNNER_SCOPE: "repository",
      GITEA_JOB_PAGES: 0,
    });
    await provisionEnv(env);
    const gitea = giteaControl(env);
    await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
    await backendControl(env).mode({ runner: true, bootMs: 100, fetchIntervalMs: 200, jobMs: 1_500, failRate: 0.2, hangRate: 0.05, hangMs: 700, seed: 11 });
    const d = createDispatcher({ config: loadConfig(env) });
    const queued: number[] = [];
    /** When each slot holder was first seen with no runner asked for (its record unadmitted). */
    const unasked = new Map<string, number>();
    let longest = 0;
    const sample = async () => {
      const { holders } = await d.withState(({ admission }) => admission.snapshot("pod"));
      const states = await assignmentStates(env, holders);
      const now = Date.now();
      holders.forEach((id, i) => {
        if (!UNADMITTED_STATES.has(states[i] as never)) return void unasked.delete(id);
        if (!unasked.has(id)) unasked.set(id, now);
        longest = Math.max(longest, now - unasked.get(id)!);
      });
      for (const id of [...unasked.keys()]) if (!holders.includes(id)) unasked.delete(id);
    };
    const sending: Promise<void>[] = [];
    const end = Date.now() + 240_000;
    for (let i = 0; ; i++) {
      if (i % 12 === 0 && i / 12 < BURSTS)
        queued.push(...(await gitea.queue(REPOSITORIES.map((repository) => ({ labels: ["ubuntu-latest"], repository, runMs: 1_000 })))).jobs);
      for (const delivery of await gitea.deliver(() => true)) sending.push(gitea.send([delivery]));
      if (i % 2 === 0) await tick(env);
      await sample();
      const { jobs } = await gitea.actions();
      if (queued.length === BURSTS * REPOSITORIES.length && jobs.every((j) => j.status === "completed")) break;
      if (Date.now() > end) throw new Error(`timed out: ${jobs.filter((j) => j.status !== "completed").length} jobs left`);
      await sleep(500);
    }
    // The webhooks of the last completions may still be in Gitea's outbox: delivered now.
    await Promise.all(sending);
    await gitea.deliver();
    const { jobs, taken } = await gitea.actions();
    // Every job ran, once.
    expect(jobs.filter((j) => j.status !== "completed")).toEqual([]);
    expect(taken.map((t) => t.job).toSorted()).toEqual(queued.toSorted());
    // The failures were there (turns that failed, so jobs that waited again).
    expect((await backendControl(env).state()).failed).toBeGreaterThan(0);
    // No slot was held past ACK_WAIT_MS and a pass (sampled every half second, ticks every second) by a job nobody asked a runner for.
    expect(longest).toBeLessThan(ACK_WAIT_MS + 5_000);
    // At the end: every record completed, no slot held, nobody waiting.
    const ids = queued.map((j) => `gitea-${j}-1`);
    const states = await assignmentStates(env, ids);
    expect(states.filter((s) => s !== "completed")).toEqual([]);
    expect(await d.withState(({ waiting }) => waiting.oldest("pod", 200))).toEqual([]);
    expect((await d.withState(({ admission }) => admission.snapshot("pod"))).holders).toEqual([]);
    await d.close();
  },
);
