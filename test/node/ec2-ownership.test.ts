// The ec2 driver's ownership of its instances: an instance whose RunInstances was answered to a
// Worker that died is adopted by the sweep while its job runs (never terminated under it), two
// deployments in one account never touch each other's instances, a round's bootstrap is valid
// when its instance is made however long the account was full, and an attempt whose parameters
// changed after a cut finds the instance it made instead of repeating a refused request.
import { afterAll, describe, expect, it } from "vitest";
import { BackendError } from "../../src/domain/backend.ts";
import { AccountFull, BOOT_ALLOWANCE_MS, BOOTSTRAP_TTL_MS } from "../../src/backends/ec2/driver.ts";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { bootOf } from "../../scripts/simulate-hetzner.mjs";
import { ec2Scene, EC2_TEMPLATE, type Ec2Scene } from "../harness/ec2.ts";
import { createEc2Api } from "../../src/backends/ec2/client.ts";
import { deploymentInstance } from "../../src/app/select-backend.ts";
import { FAKE_AWS, FAKE_REGION } from "../../scripts/fake-ec2.mjs";
import { failure, vmRequest, type SceneWrap } from "../harness/hetzner.ts";

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
/** A fetch whose next RunInstances answer is lost (the Worker died after EC2 made the instance). */
function losingRunAnswer() {
  const lost = { armed: false };
  const wrap: SceneWrap = {
    fetch: async (input, init) => {
      const isRun = input instanceof Request && (await input.clone().text()).includes("Action=RunInstances");
      const res = await fetch(input, init);
      if (lost.armed && isRun) throw ((lost.armed = false), new Error("the answer was lost"));
      return res;
    },
  };
  return { lost, wrap };
}
const errors = async (s: Ec2Scene, code: string) => (await s.state()).requests.filter((r) => r.error === code).length;

describe("ec2 ownership", () => {
  it("an instance made for a job whose note was never written, the job claimed before any later pass: the sweep adopts it, and ends it when the assignment ends", async () => {
    const { lost, wrap } = losingRunAnswer();
    const s = await scene({}, wrap);
    lost.armed = true;
    await expect(s.driver.accept(vmRequest("c-1"), within())).rejects.toThrow();
    const [made] = await s.live();
    expect(made).toBeDefined();
    s.clock.t += ORPHAN_GRACE_MS + 60_000;
    expect((await s.sweep(new Map([["c-1", { ended: false }]]))).events).toEqual([]);
    expect((await s.live()).map((i) => i.id)).toEqual([made!.id]);
    // Noted now: its status read and its teardown find it without a lookup.
    const reads = (await s.state()).requests.length;
    await s.driver.teardown("c-1", within());
    expect((await s.state()).requests.filter((r) => r.action === "DescribeInstances").length).toBe(
      (await s.state()).requests.slice(0, reads).filter((r) => r.action === "DescribeInstances").length,
    );
    expect(await s.live()).toEqual([]);
  });

  it("two deployments in one account whose job ids overlap: each makes, sweeps and ends its own instance, never the other's", async () => {
    const prod = await scene();
    const staging = await scene({ PUBLIC_URL: "https://staging.example.org" }, { base: prod.base });
    for (const d of [prod, staging]) expect(await d.driver.accept(vmRequest("gitea-7-1"), within())).toBe("pending");
    expect(await prod.live()).toHaveLength(2);
    await prod.driver.teardown("gitea-7-1", within());
    await prod.driver.teardown("gitea-7-1", within());
    prod.clock.t += 2 * ORPHAN_GRACE_MS;
    await prod.sweep(new Map([["gitea-7-1", { ended: true }]]));
    const [left] = await prod.live();
    expect(await prod.live()).toHaveLength(1);
    expect(left!.tags["gdr-instance"]).not.toBe((await staging.state()).instances.find((i) => i.state === "terminated")?.tags["gdr-instance"]);
    expect(await staging.driver.accept(vmRequest("gitea-7-1"), within())).toBe("pending");
    expect((await staging.live()).map((i) => i.id)).toEqual([left!.id]);
  });

  it("a job that waited at the account's limit longer than a bootstrap lives: its instance is made with a token that is valid then", async () => {
    const s = await scene();
    await s.ctl("mode", { instanceLimit: 0 });
    expect(await failure(s.driver.accept(vmRequest("w-1"), within()))).toBeInstanceOf(AccountFull);
    await s.ctl("mode", { instanceLimit: 100 });
    s.clock.t += BOOTSTRAP_TTL_MS + 60_000;
    expect(await s.driver.accept(vmRequest("w-1"), within())).toBe("pending");
    const [made] = await s.live();
    expect(await s.stores.bootstraps.take("w-1", bootOf(made!.userData)!.token)).toBeDefined();
  });

  it("near miss: one that waited less than a bootstrap lives, but into its last BOOT_ALLOWANCE_MS, gets a token that still has that long to boot", async () => {
    const s = await scene();
    await s.ctl("mode", { instanceLimit: 0 });
    expect(await failure(s.driver.accept(vmRequest("w-2"), within()))).toBeInstanceOf(AccountFull);
    await s.ctl("mode", { instanceLimit: 100 });
    s.clock.t += BOOTSTRAP_TTL_MS - BOOT_ALLOWANCE_MS + 60_000;
    expect(await s.driver.accept(vmRequest("w-2"), within())).toBe("pending");
    const [made] = await s.live();
    // The instance boots slowly, but within its allowance: its token is still good.
    s.clock.t += BOOT_ALLOWANCE_MS - 1_000;
    expect(await s.stores.bootstraps.take("w-2", bootOf(made!.userData)!.token)).toBeDefined();
  });

  it("an attempt cut after EC2 made its instance, then asked with other parameters (a new template): the instance is found and kept, the refused request never repeated", async () => {
    const { lost, wrap } = losingRunAnswer();
    const s = await scene({}, wrap);
    lost.armed = true;
    await expect(s.driver.accept(vmRequest("m-1"), within())).rejects.toThrow();
    const [made] = await s.live();
    const changed = vmRequest("m-1", { name: "small", template: { Tags: { team: "ci" } } });
    expect(await s.driver.accept(changed, within())).toBe("pending");
    expect(await s.driver.accept(changed, within())).toBe("pending");
    expect((await s.live()).map((i) => i.id)).toEqual([made!.id]);
    expect(await errors(s, "IdempotentParameterMismatch")).toBe(1);
    expect(await s.stores.bootstraps.take("m-1", bootOf(made!.userData)!.token)).toBeDefined();
  });

  it("the same, with the instance gone meanwhile: a new round makes one instance, and the refused request is not asked again", async () => {
    const { lost, wrap } = losingRunAnswer();
    const s = await scene({}, wrap);
    lost.armed = true;
    await expect(s.driver.accept(vmRequest("g-1"), within())).rejects.toThrow();
    const [made] = await s.live();
    await s.ctl("end", { id: made!.id, state: "terminated" });
    const changed = vmRequest("g-1", { name: "small", template: { Tags: { team: "ci" } } });
    expect(await failure(s.driver.accept(changed, within()))).toBeInstanceOf(BackendError);
    expect(await s.driver.accept(changed, within())).toBe("pending");
    expect(await s.driver.accept(changed, within())).toBe("pending");
    const [next] = await s.live();
    expect(next!.id).not.toBe(made!.id);
    expect(await errors(s, "IdempotentParameterMismatch")).toBe(1);
    // The first round's token opens nothing: it was revoked before the next was issued.
    expect(await s.stores.bootstraps.take("g-1", bootOf(made!.userData)!.token)).toBeUndefined();
    expect(await s.stores.bootstraps.take("g-1", bootOf(next!.userData)!.token)).toBeDefined();
  });

  it("the sweep's Spot backstop: an instance EC2 took back under a live assignment is reported once as an interruption; one of an ended assignment, or ended otherwise, is not", async () => {
    const s = await scene();
    for (const id of ["spot-1", "spot-2", "gone-1"]) expect(await s.driver.accept(vmRequest(id), within())).toBe("pending");
    const [a, b, c] = await s.live();
    await s.ctl("end", { id: a!.id, state: "terminated", stateReason: "Server.SpotInstanceTermination" });
    await s.ctl("end", { id: b!.id, state: "terminated", stateReason: "Server.SpotInstanceTermination" });
    await s.ctl("end", { id: c!.id, state: "terminated", stateReason: "Client.UserInitiatedShutdown" });
    const records = new Map([
      ["spot-1", { ended: false }],
      ["spot-2", { ended: true }],
      ["gone-1", { ended: false }],
    ]);
    const first = await s.sweep(records);
    expect(first.events.filter((e) => e.event === "interrupted").map((e) => e.assignment)).toEqual(["spot-1"]);
    // Its note moved on to a new round: the next sweep reports nothing again.
    expect((await s.sweep(records)).events.filter((e) => e.event === "interrupted")).toEqual([]);
  });

  it("a teardown without its note ends this backend's instance of the assignment, never another backend's of the same deployment", async () => {
    const s = await scene();
    const api = createEc2Api({ url: `${s.base}/`, region: FAKE_REGION, ...FAKE_AWS });
    const instance = deploymentInstance(s.config.stream, s.config.publicUrl);
    const tags = (backend: string) =>
      Object.entries({ "managed-by": "gitea-edge-dispatcher", "gdr-instance": instance, "gdr-backend": backend, "gdr-assignment": "t-1" }).map(
        ([Key, Value]) => ({ Key, Value }),
      );
    await api.runInstances({ ...EC2_TEMPLATE, TagSpecifications: [{ ResourceType: "instance", Tags: tags("pod") }] }, within());
    await api.runInstances({ ...EC2_TEMPLATE, TagSpecifications: [{ ResourceType: "instance", Tags: tags("gpu") }] }, within());
    await s.driver.teardown("t-1", within());
    expect((await s.live()).map((i) => i.tags["gdr-backend"])).toEqual(["gpu"]);
  });
});
