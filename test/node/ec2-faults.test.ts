// The ec2 driver where EC2 says no, or a pass is cut short: each fault ends with nothing lost (the
// assignment gets its instance), nothing doubled (one live instance per assignment) and nothing
// left running (teardown and the sweep leave none).
import type { KV } from "@nats-io/kv";
import { afterAll, describe, expect, it } from "vitest";
import { BackendError } from "../../src/domain/backend.ts";
import { AccountFull, FULL_RECHECK_MS } from "../../src/backends/ec2/driver.ts";
import { createEc2Api } from "../../src/backends/ec2/client.ts";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { FAKE_AWS, FAKE_REGION } from "../../scripts/fake-ec2.mjs";
import { bootOf, readLaunch } from "../../scripts/simulate-hetzner.mjs";
import { ec2Scene, EC2_TEMPLATE, type Ec2Scene } from "../harness/ec2.ts";
import { aroundKv, failure, vmRequest } from "../harness/hetzner.ts";
import type { SceneWrap } from "../harness/hetzner.ts";

const scenes: Ec2Scene[] = [];
afterAll(async () => {
  for (const s of scenes.splice(0)) await s.close();
});
async function scene(extra: Record<string, unknown> = {}, wrap: SceneWrap = {}) {
  const s = await ec2Scene(extra, wrap);
  scenes.push(s);
  return s;
}
const within = () => AbortSignal.timeout(3_000);
const A = { InstanceType: "m7i.large", SubnetId: "subnet-0000000a" };
const B = { InstanceType: "c7i.large", SubnetId: "subnet-0000000b" };
const runs = async (s: Ec2Scene) => (await s.state()).requests.filter((r) => r.action === "RunInstances");

/** The instance boots `id`'s runner: the bootstrap in its user_data opens `id`'s launch, once. */
async function bootsFor(s: Ec2Scene, userData: string, id: string) {
  const boot = bootOf(userData)!;
  expect(boot.url).toBe(`https://dispatch.example.org/v1/assignments/${id}/bootstrap`);
  const launch = await s.stores.bootstraps.take<{ script: string }>(id, boot.token);
  expect(readLaunch(launch!.script).files[".runner"]).toContain(`identity-of-${id}`);
}

describe("ec2 driver faults", () => {
  it("the first candidate short of capacity: the second is made in the same pass, with the tags, IMDSv2 and a terminating shutdown", async () => {
    const s = await scene();
    await s.ctl("mode", { noCapacity: [{ InstanceType: A.InstanceType, SubnetId: A.SubnetId }] });
    expect(await s.driver.accept(vmRequest("c-1", { name: "small", candidates: [A, B] }), within())).toBe("pending");
    const [made] = await s.live();
    expect(made).toMatchObject({ InstanceType: B.InstanceType, SubnetId: B.SubnetId, market: "on-demand" });
    expect(made!.tags).toMatchObject({ "managed-by": "gitea-edge-dispatcher", "gdr-assignment": "c-1", "gdr-pool": "small", "gdr-backend": "pod" });
    expect(made!.input).toMatchObject({
      InstanceInitiatedShutdownBehavior: "terminate",
      MetadataOptions: { HttpTokens: "required" },
      MinCount: 1,
      MaxCount: 1,
    });
    const specs = made!.input.TagSpecifications as { ResourceType: string }[];
    expect(specs.map((t) => t.ResourceType)).toEqual(["instance", "volume"]);
    // Two attempts, two tokens: the refused one made nothing to be idempotent to.
    const tokens = (await runs(s)).map((r) => r.input!.ClientToken as string);
    expect(tokens).toHaveLength(2);
    expect(new Set(tokens).size).toBe(2);
    for (const t of tokens) expect(t.length).toBeLessThanOrEqual(64);
    await bootsFor(s, made!.userData, "c-1");
  });

  it("Spot short everywhere: with spotFallback the candidates are asked on-demand in the same pass; without it, a retry", async () => {
    const s = await scene();
    await s.ctl("mode", { noCapacity: [{ market: "spot" }] });
    const spot = { name: "small", candidates: [A, B], market: "spot" as const };
    expect(await failure(s.driver.accept(vmRequest("s-1", spot), within()))).toBeInstanceOf(BackendError);
    expect(await s.live()).toEqual([]);
    expect(await s.driver.accept(vmRequest("s-2", { ...spot, spotFallback: "on-demand" }), within())).toBe("pending");
    const live = await s.live();
    expect(live.map((i) => [i.market, i.InstanceType])).toEqual([["on-demand", A.InstanceType]]);
    const markets = (await runs(s)).map((r) => (r.input!.InstanceMarketOptions as { MarketType?: string } | undefined)?.MarketType ?? "on-demand");
    expect(markets).toEqual(["spot", "spot", "spot", "spot", "on-demand"]);
  });

  it("the account's instance limit is a full backend: no RunInstances until the recheck, then the one instance", async () => {
    const s = await scene();
    await s.ctl("mode", { instanceLimit: 0 });
    const err = await failure(s.driver.accept(vmRequest("l-1"), within()));
    expect(err).toBeInstanceOf(AccountFull);
    expect((err as AccountFull).full).toBe(true);
    expect(await failure(s.driver.accept(vmRequest("l-1"), within()))).toBeInstanceOf(AccountFull);
    expect(await runs(s)).toHaveLength(1);
    await s.ctl("mode", { instanceLimit: 10 });
    s.clock.t += FULL_RECHECK_MS + 1;
    expect(await s.driver.accept(vmRequest("l-1"), within())).toBe("pending");
    expect(await s.live()).toHaveLength(1);
  });

  it("throttling and a 5xx are BackendErrors; the next pass makes the one instance", async () => {
    const s = await scene();
    await s.ctl("mode", { throttleFirst: 1, failFirst: 1 });
    expect(await failure(s.driver.accept(vmRequest("t-1"), within()))).toMatchObject({ name: "BackendError", status: 503 });
    expect(await failure(s.driver.accept(vmRequest("t-1"), within()))).toMatchObject({ name: "BackendError", status: 500 });
    expect(await s.driver.accept(vmRequest("t-1"), within())).toBe("pending");
    expect(await s.live()).toHaveLength(1);
  });

  it("a RunInstances whose answer was lost: the pass after asks with the same token and user_data, and EC2 answers with the same instance", async () => {
    const cut = { armed: false };
    const s = await scene(
      {},
      {
        fetch: async (input, init) => {
          const body = await (input as Request).clone().text();
          const res = await fetch(input, init);
          if (cut.armed && body.startsWith("Action=RunInstances")) {
            cut.armed = false;
            throw new Error("killed after RunInstances");
          }
          return res;
        },
      },
    );
    cut.armed = true;
    expect(await failure(s.driver.accept(vmRequest("k-1"), within()))).toBeInstanceOf(BackendError);
    expect(await s.driver.accept(vmRequest("k-1"), within())).toBe("pending");
    const asked = await runs(s);
    expect(asked).toHaveLength(2);
    expect(asked[0]!.input).toEqual(asked[1]!.input);
    expect((await s.state()).instances).toHaveLength(1);
    await bootsFor(s, (await s.live())[0]!.userData, "k-1");
    await s.driver.teardown("k-1", within());
    expect(await s.live()).toEqual([]);
  });

  it("a pass cut after its second candidate's RunInstances, the first one's capacity back: the pass after resumes at the second (one instance)", async () => {
    const cut = { armed: false };
    const s = await scene(
      {},
      {
        fetch: async (input, init) => {
          const body = await (input as Request).clone().text();
          const res = await fetch(input, init);
          if (cut.armed && body.startsWith("Action=RunInstances") && body.includes(B.SubnetId)) {
            cut.armed = false;
            throw new Error("killed after RunInstances");
          }
          return res;
        },
      },
    );
    await s.ctl("mode", { noCapacity: [{ SubnetId: A.SubnetId }] });
    cut.armed = true;
    const pool = { name: "small", candidates: [A, B] };
    expect(await failure(s.driver.accept(vmRequest("r-1", pool), within()))).toBeInstanceOf(BackendError);
    await s.ctl("mode", { noCapacity: [] });
    expect(await s.driver.accept(vmRequest("r-1", pool), within())).toBe("pending");
    expect((await s.live()).map((i) => i.SubnetId)).toEqual([B.SubnetId]);
  });

  it("a teardown of an instance EC2 has forgotten (terminated long ago) is done, not an error", async () => {
    const s = await scene();
    await s.driver.accept(vmRequest("f-1"), within());
    const [i] = await s.live();
    await s.ctl("forget", { id: i!.id });
    await s.driver.teardown("f-1", within());
    await s.driver.teardown("f-1", within());
    expect((await s.state()).requests.filter((r) => r.action === "TerminateInstances").map((r) => r.error)).toEqual(["InvalidInstanceID.NotFound"]);
  });

  it("a pass cut at any records-bucket call: the pass after leaves one instance, booting the job's own bootstrap", async () => {
    for (let at = 1; at <= 6; at++) {
      const cut = { n: 0, at };
      const kv = (real: KV) =>
        aroundKv(real, new Set(["get", "put", "create", "update"]), async (call) => {
          const result = await call();
          if (++cut.n === cut.at) throw new Error(`killed after call ${cut.n}`);
          return result;
        });
      const s = await scene({}, { kv });
      await failure(s.driver.accept(vmRequest("w-1"), within()));
      cut.at = Infinity;
      expect(await s.driver.accept(vmRequest("w-1"), within()), `at ${at}`).toBe("pending");
      expect(await s.live(), `at ${at}`).toHaveLength(1);
      await bootsFor(s, (await s.live())[0]!.userData, "w-1");
      await s.driver.teardown("w-1", within());
      expect(await s.live(), `at ${at}`).toEqual([]);
    }
  });

  it("an instance that ends before its claim is terminated and asked for again, with a new token: one live", async () => {
    const s = await scene();
    await s.driver.accept(vmRequest("e-1"), within());
    const [first] = await s.live();
    await s.ctl("end", { id: first!.id, state: "stopped", stateReason: "Server.SpotInstanceTermination" });
    s.clock.t += 90_001;
    expect(((await failure(s.driver.accept(vmRequest("e-1"), within()))) as Error).message).toContain("Server.SpotInstanceTermination");
    expect(await s.driver.accept(vmRequest("e-1"), within())).toBe("pending");
    const live = await s.live();
    expect(live).toHaveLength(1);
    expect(live[0]!.id).not.toBe(first!.id);
  });

  it("a page that fails in the middle of the sweep terminates nothing; the next sweep ends every orphan, and no instance of another dispatcher or backend", async () => {
    const s = await scene();
    const api = createEc2Api({ url: `${s.base}/`, region: FAKE_REGION, ...FAKE_AWS });
    const make = async (tags: Record<string, string>, n: number) => {
      for (let i = 0; i < n; i++) {
        const Tags = Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
        await api.runInstances({ ...EC2_TEMPLATE, TagSpecifications: [{ ResourceType: "instance", Tags }] }, within());
      }
    };
    // Ours without a note (orphans): 130, over two pages; another dispatcher's and another backend's: kept.
    const ours = { "gdr-instance": "", "gdr-backend": "pod", "gdr-assignment": "gone" };
    ours["gdr-instance"] = await instanceOf(s);
    await make(ours, 130);
    await make({ ...ours, "gdr-instance": "someone-else" }, 3);
    await make({ ...ours, "gdr-backend": "gpu" }, 3);
    s.clock.t += ORPHAN_GRACE_MS + 60_000;
    await s.ctl("mode", { failDescribeCalls: [2] });
    expect(await failure(s.sweep())).toBeInstanceOf(BackendError);
    expect(await s.live()).toHaveLength(136);
    await s.ctl("mode", { failDescribeCalls: [] });
    expect((await s.sweep()).deleted).toBe(130);
    expect((await s.live()).map((i) => i.tags["gdr-instance"] === "someone-else" || i.tags["gdr-backend"] === "gpu")).toEqual(Array(6).fill(true));
  });
});

/** This dispatcher's instance tag, as the driver writes it. */
async function instanceOf(s: Ec2Scene): Promise<string> {
  await s.driver.accept(vmRequest("probe"), within());
  const probe = (await s.live()).find((i) => i.tags["gdr-assignment"] === "probe")!;
  await s.driver.teardown("probe", within());
  return probe.tags["gdr-instance"]!;
}
