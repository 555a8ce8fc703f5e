// Drives the fake Forgejo and the poller object from workerd tests.
import { runDurableObjectAlarm } from "cloudflare:test";
import { env as bindings } from "cloudflare:workers";
import { loadConfig } from "../../src/app/config.ts";
import { POLLER_BINDING, pollerName, type PollerNamespace } from "../../src/app/forgejo-binding.ts";
import type { PollOutcome } from "../../src/forge/forgejo/poller.ts";
import type { KnownJob } from "../../src/forge/forgejo/jobs.ts";
import { request, withBindings } from "./worker.ts";

export interface FakeForgejoJob {
  id: number;
  attempt: number;
  handle: string;
  name: string;
  owner_id: number;
  repo_id: number;
  runs_on: string[];
  status: string;
  task_id: number;
}

export interface FakeForgejoRunner {
  id: number;
  uuid: string;
  token: string;
  name: string;
  ephemeral: boolean;
  labels: string[];
  task?: number;
}

export function forgejoControl(env: Record<string, string>) {
  const base = `${env.GITEA_URL}/_control`;
  const post = async (what: string, body: unknown) => (await fetch(`${base}/${what}`, { method: "POST", body: JSON.stringify(body) })).json();
  return {
    queue: async (jobs: { runs_on?: string[]; repository?: string; runMs?: number; handle?: string; id?: number; run?: number; concurrency?: string }[]) =>
      ((await post("queue", jobs)) as { jobs: FakeForgejoJob[] }).jobs,
    cancel: (id: number) => post("cancel", { id }),
    rerun: (id: number, handle?: string, sameAttempt = false) => post("rerun", { id, ...(handle ? { handle } : {}), sameAttempt }) as Promise<FakeForgejoJob>,
    /** The jobs list answers `jobs` (a status, or "down" to drop the connection; 0: normally); registration answers `register`. */
    fault: (f: { jobs?: number | "down"; register?: number; repository?: number | "down"; registerRepo?: number }) => post("fault", f),
    rename: (from: string, to: string) => post("rename", { from, to }),
    version: (version: string) => post("version", { version }),
    webhook: (hook: { url?: string; secret: string }) => post("webhook", hook),
    deliveries: async () =>
      ((await post("deliveries", {})) as { deliveries: { event: string; run: number; headers: Record<string, string>; body: string }[] }).deliveries,
    async state(): Promise<{
      runners: FakeForgejoRunner[];
      jobs: FakeForgejoJob[];
      taken: { job: number; attempt: number; handle: string; runner: string }[];
      registrations: number;
      requests: { method: string; path: string; search: string; headers: Record<string, string>; body: string }[];
    }> {
      return (await fetch(`${base}/state`)).json();
    },
  };
}

export function pollerStub(env: Record<string, string>) {
  const ns = (bindings as unknown as Record<string, PollerNamespace>)[POLLER_BINDING]!;
  const config = loadConfig(env);
  return ns.get(ns.idFromName(pollerName(config.forgejo!)));
}

/** One poll now, through the object (as a run webhook would ask for it). */
export async function poll(env: Record<string, string>): Promise<PollOutcome> {
  return pollerStub(env).pollNow(loadConfig(withBindings(env)));
}

/** Runs the object's alarm if one is set (true), as workerd would when it is due. */
export const fireAlarm = (env: Record<string, string>) => runDurableObjectAlarm(pollerStub(env));

export const knownOf = async (env: Record<string, string>) => (await pollerStub(env).known()) as KnownJob[];

/** Delivers the fake Forgejo's run webhooks to the Worker. */
export async function deliverRuns(env: Record<string, string>): Promise<number[]> {
  const statuses: number[] = [];
  for (const d of await forgejoControl(env).deliveries()) {
    const res = await request(env, "/v1/forgejo/webhook", { method: "POST", headers: d.headers, body: d.body });
    statuses.push(res.status);
    await res.body?.cancel();
  }
  return statuses;
}

/** Plays `forgejo-runner one-job --handle`: declares the labels, takes the handle's job and reports `result`. The task id, or undefined when none was given. */
export async function runAsRunner(
  env: Record<string, string>,
  runner: { uuid: string; token: string },
  labels: string[],
  handle: string,
  result: "RESULT_SUCCESS" | "RESULT_FAILURE" | null = "RESULT_SUCCESS",
): Promise<number | undefined> {
  const call = async (name: string, body: unknown) => {
    const res = await fetch(`${env.GITEA_URL}/api/actions/runner.v1.RunnerService/${name}`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-runner-uuid": runner.uuid, "x-runner-token": runner.token },
      body: JSON.stringify(body),
    });
    return (await res.json()) as { task?: { id: string } };
  };
  await call("Declare", { version: "12.8.0", labels });
  const { task } = await call("FetchSingleTask", { tasksVersion: "0", handle });
  if (!task) return undefined;
  if (result) await call("UpdateTask", { state: { id: task.id, result } });
  return Number(task.id);
}

/** The runner reports its task done (UpdateTask with a result), as a runner whose job ended does. */
export async function finishTask(env: Record<string, string>, runner: { uuid: string; token: string }, task: number, result = "RESULT_SUCCESS"): Promise<void> {
  const res = await fetch(`${env.GITEA_URL}/api/actions/runner.v1.RunnerService/UpdateTask`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-runner-uuid": runner.uuid, "x-runner-token": runner.token },
    body: JSON.stringify({ state: { id: String(task), result } }),
  });
  await res.body?.cancel();
}
