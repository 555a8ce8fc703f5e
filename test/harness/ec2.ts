// The ec2 driver on the shared fake EC2 API (an account of its own per scene, under a path prefix),
// its notes and bootstraps in a provisioned records bucket of its own, on a clock the test moves.
import { inject } from "vitest";
import { createRunnerBackend } from "../../src/app/select-backend.ts";
import type { Config } from "../../src/app/config.ts";
import type { RunnerBackend } from "../../src/domain/backend.ts";
import type { DriverStores } from "../../src/backends/driver-module.ts";
import { closeNats, openNats } from "../../src/nats/connection.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { createBootstraps } from "../../src/state/bootstraps.ts";
import { bindBucket, readManyJson, type ReadMany } from "../../src/state/kv.ts";
import { createDriverFigures } from "../../src/state/driver-figures.ts";
import { FAKE_AWS, FAKE_REGION } from "../../scripts/fake-ec2.mjs";
import { giteaTestEnv, provisionEnv, uniqueName } from "./env.ts";
import { sweepOnce, type SceneWrap } from "./hetzner.ts";
import { placementOf } from "../../src/backends/refused-field.ts";

export const EC2_TEMPLATE = { ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large" };

export interface FakeInstance {
  id: string;
  InstanceType: string;
  SubnetId?: string;
  market: "spot" | "on-demand";
  state: string;
  userData: string;
  tags: Record<string, string>;
  input: Record<string, unknown>;
}

export interface Ec2Scene {
  config: Config;
  driver: RunnerBackend;
  stores: DriverStores;
  clock: { t: number };
  base: string;
  ctl(what: string, body?: unknown): Promise<Record<string, unknown>>;
  state(): Promise<{ instances: FakeInstance[]; requests: { action?: string; input?: Record<string, unknown>; error?: string }[] }>;
  /** Instances not terminated. */
  live(): Promise<FakeInstance[]>;
  sweep(records?: Map<string, { ended: boolean }>, lifetimes?: Map<string, number>): Promise<{ deleted: number; events: Record<string, unknown>[] }>;
  close(): Promise<void>;
}

export async function ec2Scene(extra: Record<string, unknown> = {}, wrap: SceneWrap = {}): Promise<Ec2Scene> {
  const base = wrap.base ?? `${inject("ec2Url")}/${uniqueName("ec2")}`;
  const ctl = async (what: string, body?: unknown) =>
    (await (await fetch(`${base}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {})).json()) as Record<string, unknown>;
  const config = await provisionEnv(
    giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:2", {
      POD_DRIVER: "ec2",
      EC2_API_URL: `${base}/`,
      EC2_REGION: FAKE_REGION,
      AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
      VM_TEMPLATE: JSON.stringify(EC2_TEMPLATE),
      ...extra,
    }),
  );
  const handle = await openNats(config);
  const bound = await bindBucket(handle, recordsBucket(config));
  const kv = wrap.kv ? wrap.kv(bound) : bound;
  const clock = { t: Date.now() };
  const stores: DriverStores = {
    kv,
    readMany: (wrap.readMany ?? ((r: ReadMany) => r))((keys) => readManyJson(handle, recordsBucket(config), keys)),
    bootstraps: createBootstraps(kv, new Uint8Array(32).fill(9), () => clock.t),
    figures: createDriverFigures(kv),
  };
  const more = { now: () => clock.t, withStores: <T>(fn: (s: DriverStores) => Promise<T>) => fn(stores) };
  const driver = createRunnerBackend(config, config.backends[0]!, wrap.fetch, more);
  const state = () => ctl("state") as ReturnType<Ec2Scene["state"]>;
  return {
    config,
    driver,
    stores,
    clock,
    base,
    ctl,
    state,
    live: async () => (await state()).instances.filter((i) => i.state !== "terminated"),
    sweep: (records, lifetimes) => sweepOnce(driver, records, lifetimes, 10_000, more.now, config.pools.map(placementOf)),
    close: () => closeNats(handle.nc),
  };
}
