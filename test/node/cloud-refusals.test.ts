// A cloud that refuses what a variable of ours made it send is a configuration problem, not a
// transient failure: the refusal names the variable (and, for a template, the pool and field with
// its value), the create leaves nothing behind, /healthz lists it while it keeps coming, and a
// create that goes through answers it. On the strict fakes of both APIs: Hetzner's 422
// invalid_input names the field (details.fields); its 401 the token; EC2's InvalidAMIID.* and
// InvalidParameterValue the parameter; its AuthFailure the key pair.
import { afterEach, describe, expect, it } from "vitest";
import { BackendRefused } from "../../src/domain/backend.ts";
import { checkHealth } from "../../src/http/health.ts";
import { REFUSAL_FRESH_MS, withRefusal } from "../../src/state/driver-figures.ts";
import { failure, hetznerScene, vmRequest, type HetznerScene } from "../harness/hetzner.ts";
import { ec2Scene, type Ec2Scene } from "../harness/ec2.ts";

const scenes: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const s of scenes.splice(0)) await s.close();
});
const track = <S extends { close(): Promise<void> }>(s: S) => (scenes.push(s), s);
const signal = () => AbortSignal.timeout(5_000);
const refusal = async (p: Promise<unknown>) => {
  const err = await failure(p);
  expect(err).toBeInstanceOf(BackendRefused);
  const r = err as BackendRefused;
  return { kind: r.kind, variable: r.variable, message: r.message };
};

describe("hetzner refusals", () => {
  it("422 invalid_input names the pool, the candidate and the field with its value; no server, no bootstrap, no note is left", async () => {
    const s: HetznerScene = track(await hetznerScene());
    const pool = { name: "large", candidates: [{ server_type: "cx999", location: "fsn1" }] };
    expect(await refusal(s.driver.accept(vmRequest("hz-bad-type", pool), signal()))).toEqual({
      kind: "configuration",
      variable: 'RUNNER_POOLS pool "large" candidates[0].server_type',
      message: 'Hetzner refused RUNNER_POOLS pool "large" candidates[0].server_type = "cx999" (422 invalid_input: server type cx999 not found)',
    });
    expect((await s.state()).servers).toEqual([]);
    const keys = await s.stores.kv.keys();
    const left: string[] = [];
    for await (const k of keys) left.push(k);
    // The note is gone; the bootstrap issued for the create is spent (revoked), never takeable.
    expect(left.filter((k) => k.includes("hz-bad-type"))).toEqual([]);
    const boots = left.filter((k) => k.startsWith("boot."));
    expect(boots).toHaveLength(1);
    expect((await s.stores.kv.get(boots[0]!))?.json<{ spent?: boolean }>().spent).toBe(true);
  });

  it("near misses: a field of the pool's template, then of VM_TEMPLATE, is named where it was written", async () => {
    const s = track(await hetznerScene());
    expect((await refusal(s.driver.accept(vmRequest("hz-t", { name: "p", template: { server_type: "cx998" } }), signal()))).variable).toBe(
      'RUNNER_POOLS pool "p" template.server_type',
    );
    const t = track(await hetznerScene({ VM_TEMPLATE: JSON.stringify({ image: "ubuntu-99.04", server_type: "cx22", location: "fsn1" }) }));
    expect(await refusal(t.driver.accept(vmRequest("hz-i"), signal()))).toMatchObject({
      variable: "VM_TEMPLATE.image",
      message: expect.stringContaining('= "ubuntu-99.04"'),
    });
  });

  it("a token Hetzner refuses (401 unauthorized) is HCLOUD_TOKEN's, never shown", async () => {
    const s = track(await hetznerScene({ HCLOUD_TOKEN: "a-wrong-token-of-64-chars-0000000000000000000000000000000000000000" }));
    const r = await refusal(s.driver.accept(vmRequest("hz-tok"), signal()));
    expect(r).toMatchObject({ kind: "credentials", variable: "HCLOUD_TOKEN" });
    expect(r.message).not.toContain("a-wrong-token");
  });
});

describe("ec2 refusals", () => {
  it("InvalidAMIID names VM_TEMPLATE.ImageId with its value; InvalidParameterValue the parameter it names", async () => {
    const s: Ec2Scene = track(await ec2Scene({ VM_TEMPLATE: JSON.stringify({ ImageId: "ami-xyz", InstanceType: "m7i.large" }) }));
    expect(await refusal(s.driver.accept(vmRequest("ec2-ami"), signal()))).toEqual({
      kind: "configuration",
      variable: "VM_TEMPLATE.ImageId",
      message: 'EC2 refused VM_TEMPLATE.ImageId = "ami-xyz" (InvalidAMIID.Malformed)',
    });
    expect((await s.state()).instances).toEqual([]);
    const t = track(await ec2Scene());
    const pool = { name: "big", candidates: [{ InstanceType: "m6i.large", SubnetId: "subnet-0a0a0a0a" }] };
    expect(await refusal(t.driver.accept(vmRequest("ec2-type", pool), signal()))).toMatchObject({
      variable: 'RUNNER_POOLS pool "big" candidates[0].InstanceType',
      message: 'EC2 refused RUNNER_POOLS pool "big" candidates[0].InstanceType = "m6i.large" (InvalidParameterValue)',
    });
  });

  it("a key pair EC2 does not know (AuthFailure) is the AWS keys', never shown", async () => {
    const s = track(await ec2Scene({ AWS_SECRET_ACCESS_KEY: "wrongwrongwrongwrongwrongwrongwrongwrong" }));
    const r = await refusal(s.driver.accept(vmRequest("ec2-key"), signal()));
    expect(r).toMatchObject({ kind: "credentials", variable: "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" });
    expect(r.message).not.toContain("wrongwrong");
  });
});

describe("/healthz and kept refusals", () => {
  it("lists a refusal while it keeps coming, by backend and variable; not once it is older than REFUSAL_FRESH_MS, nor after a create went through", async () => {
    const s = track(await hetznerScene());
    const message = 'Hetzner refused RUNNER_POOLS pool "large" candidates[0].server_type = "cx999" (422 invalid_input)';
    const variable = 'RUNNER_POOLS pool "large" candidates[0].server_type';
    await s.stores.figures.change("pod", (f) => withRefusal(f, variable, { kind: "configuration", message, at: Date.now() }));
    const sick = await checkHealth(s.config, false);
    expect([sick.status, sick.body.problems]).toEqual([503, [`backend pod: ${message}; fix ${variable}`]]);
    // Near miss: the same refusal, last seen just past the window.
    await s.stores.figures.change("pod", (f) => withRefusal(f, variable, { kind: "configuration", message, at: Date.now() - REFUSAL_FRESH_MS - 1_000 }));
    expect((await checkHealth(s.config, false)).status).toBe(200);
    // Fresh again, then a create goes through: it is answered.
    await s.stores.figures.change("pod", (f) => withRefusal(f, variable, { kind: "configuration", message, at: Date.now() }));
    s.clock.real = true;
    expect(await s.driver.accept(vmRequest("hz-good"), signal())).toBe("pending");
    expect((await s.stores.figures.get("pod"))?.refused).toBeUndefined();
    expect((await checkHealth(s.config, false)).status).toBe(200);
  });
});

describe("/healthz and the cloud's offer", () => {
  it("a placement the project cannot create with is named by pool and field once the tick read the offer, before any job; a configuration without it is well at once", async () => {
    const pools = [{ name: "large", backend: "pod", labels: ["large"], candidates: [{ server_type: "cx999", location: "fsn1" }] }];
    const s = track(await hetznerScene({ RUNS_ON_ROUTES: "", RUNNER_POOLS: JSON.stringify(pools) }));
    // No offer read yet: nothing to hold the placements against.
    expect((await checkHealth(s.config, false)).status).toBe(200);
    await s.sweep();
    const sick = await checkHealth(s.config, false);
    const variable = 'RUNNER_POOLS pool "large" candidates[0].server_type';
    expect([sick.status, sick.body.problems]).toEqual([
      503,
      [`backend pod: ${variable} = "cx999" is no server type the project can create (cax11, cax21, ccx13, cpx21, cpx31, cx22, cx32, cx42); fix ${variable}`],
    ]);
    expect((await s.state()).servers).toEqual([]);
    // The same offer against a configuration that no longer names it (a redeploy): well, before any tick.
    expect((await checkHealth({ ...s.config, pools: [] }, false)).status).toBe(200);
    // An offer read from another API URL is not this backend's.
    await s.stores.figures.change("pod", (f) => ({ ...f, offer: { ...f.offer!, of: `${s.base}-other` } }));
    expect((await checkHealth(s.config, false)).status).toBe(200);
  });

  it("a refusal of the same field is said once, in the cloud's own words", async () => {
    const pools = [{ name: "large", backend: "pod", labels: ["large"], candidates: [{ server_type: "cx999", location: "fsn1" }] }];
    const s = track(await hetznerScene({ RUNS_ON_ROUTES: "", RUNNER_POOLS: JSON.stringify(pools) }));
    await s.sweep();
    // As the reconcile pass keeps the create's refusal (process.ts): by the same variable.
    const variable = 'RUNNER_POOLS pool "large" candidates[0].server_type';
    const message = `Hetzner refused ${variable} = "cx999" (422 invalid_input: server type cx999 not found)`;
    await s.stores.figures.change("pod", (f) => withRefusal(f, variable, { kind: "configuration", message, at: Date.now() }));
    const problems = (await checkHealth(s.config, false)).body.problems as string[];
    expect(problems).toEqual([`backend pod: ${message}; fix ${variable}`]);
  });
});
