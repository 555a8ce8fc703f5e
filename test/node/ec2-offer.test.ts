// What an EC2 account may launch, of what its pools name: the pure check (ec2/offer.ts) by its near
// misses, and the reading on the tick against the strict fake (only the names the placements hold,
// read again when a placement names one it did not ask), with /healthz naming pool and field.
import { afterEach, describe, expect, it } from "vitest";
import { askedOf, offerMismatches, type Ec2Offer } from "../../src/backends/ec2/offer.ts";
import { placementsOf, type FieldLayers } from "../../src/backends/refused-field.ts";
import { checkHealth } from "../../src/http/health.ts";
import { OFFER_MAX_AGE_MS } from "../../src/state/driver-figures.ts";
import { ec2Scene, EC2_TEMPLATE, type Ec2Scene } from "../harness/ec2.ts";

const offer: Ec2Offer = {
  types: { asked: ["m7i.large", "m7i.huge"], offered: ["m7i.large"] },
  images: { asked: ["ami-0123456789abcdef0", "ami-0123456789abcdef1"], found: { "ami-0123456789abcdef0": "x86_64" } },
};
const at = (template: Record<string, unknown>, candidate?: FieldLayers["candidate"]): FieldLayers => ({
  templateVariable: "VM_TEMPLATE",
  template,
  ...(candidate ? { pool: { name: "big" }, candidate } : {}),
});

describe("ec2 offerMismatches", () => {
  it("a type offered and an AMI found have none; one asked and not offered is named where it was written", () => {
    expect(offerMismatches(offer, at(EC2_TEMPLATE))).toEqual([]);
    expect(offerMismatches(offer, at(EC2_TEMPLATE, { index: 0, value: { InstanceType: "m7i.huge", SubnetId: "subnet-0123456789abcdef0" } }))).toEqual([
      {
        variable: 'RUNNER_POOLS pool "big" candidates[0].InstanceType',
        message: 'RUNNER_POOLS pool "big" candidates[0].InstanceType = "m7i.huge" is no instance type offered in this region',
      },
    ]);
    // One character off the AMI found.
    expect(offerMismatches(offer, at({ ...EC2_TEMPLATE, ImageId: "ami-0123456789abcdef1" })).map((m) => m.variable)).toEqual(["VM_TEMPLATE.ImageId"]);
  });

  it("a name the offer did not ask says nothing until it is asked; an inherited name is not found", () => {
    expect(offerMismatches(offer, at({ ...EC2_TEMPLATE, InstanceType: "c7i.large" }))).toEqual([]);
    const asked = { ...offer, images: { asked: ["constructor"], found: {} } };
    expect(offerMismatches(asked, at({ ...EC2_TEMPLATE, ImageId: "constructor" })).map((m) => m.variable)).toEqual(["VM_TEMPLATE.ImageId"]);
  });

  it("asks each name once, of every placement", () => {
    const pools = [
      {
        name: "p",
        candidates: [
          { InstanceType: "c7i.large", SubnetId: "s" },
          { InstanceType: "m7i.large", SubnetId: "s" },
        ],
      },
    ];
    expect(askedOf(placementsOf("VM_TEMPLATE", EC2_TEMPLATE, pools))).toEqual({ types: ["c7i.large", "m7i.large"], images: ["ami-0123456789abcdef0"] });
  });
});

describe("the ec2 tick reads the offer on the fake EC2 API", () => {
  const scenes: Ec2Scene[] = [];
  afterEach(async () => {
    for (const s of scenes.splice(0)) await s.close();
  });
  const reads = async (s: Ec2Scene) =>
    (await s.state()).requests.filter((r) => r.action === "DescribeImages" || r.action === "DescribeInstanceTypeOfferings").map((r) => r.action);

  it("an instance type and an AMI the account cannot launch are named in /healthz by pool and field after the tick, before any job", async () => {
    const pools = [
      {
        name: "big",
        backend: "pod",
        labels: ["big"],
        template: { ImageId: "ami-0000000000000dead" },
        candidates: [
          { InstanceType: "m7i.large", SubnetId: "subnet-0123456789abcdef0" },
          { InstanceType: "m7i.8xlarge", SubnetId: "subnet-0123456789abcdef0" },
        ],
      },
    ];
    const s = await ec2Scene({ RUNS_ON_ROUTES: "", RUNNER_POOLS: JSON.stringify(pools) });
    scenes.push(s);
    expect((await checkHealth(s.config, false)).status).toBe(200);
    await s.sweep();
    expect(await reads(s)).toEqual(["DescribeInstanceTypeOfferings", "DescribeImages"]);
    const sick = await checkHealth(s.config, false);
    expect([sick.status, sick.body.problems]).toEqual([
      503,
      [
        'backend pod: RUNNER_POOLS pool "big" template.ImageId = "ami-0000000000000dead" is no AMI this account can launch in this region; fix RUNNER_POOLS pool "big" template.ImageId',
        'backend pod: RUNNER_POOLS pool "big" candidates[1].InstanceType = "m7i.8xlarge" is no instance type offered in this region; fix RUNNER_POOLS pool "big" candidates[1].InstanceType',
      ],
    ]);
    expect((await s.state()).instances).toEqual([]);
  });

  it("not read again within the hour while it holds every name; a name it did not ask is asked at the next tick", async () => {
    const s = await ec2Scene();
    scenes.push(s);
    await s.sweep();
    await s.sweep();
    expect(await reads(s)).toHaveLength(2);
    // A configuration naming another type (a redeploy): the next tick asks it, without waiting for the hour.
    const pools = [{ name: "c", template: { InstanceType: "c7i.large" } }];
    await s.driver.tick!({
      pools,
      lifetimes: new Map(),
      deadline: Date.now() + 10_000,
      signal: AbortSignal.timeout(10_000),
      call: (fn) => fn(AbortSignal.timeout(3_000)),
      records: async () => new Map(),
      event: () => undefined,
    });
    expect(await reads(s)).toHaveLength(4);
    expect((await s.stores.figures.get("pod"))?.offer?.data).toMatchObject({
      types: { asked: ["c7i.large", "m7i.large"], offered: ["c7i.large", "m7i.large"] },
    });
    s.clock.t += OFFER_MAX_AGE_MS;
    await s.sweep();
    expect(await reads(s)).toHaveLength(6);
  });
});
