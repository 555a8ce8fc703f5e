// The create-server body (backends/hetzner/server-body.ts): templates merge backend < pool <
// candidate, the dispatcher's name, labels and user_data win over any template, and every body and
// template is checked against Hetzner's own API description. The fake API accepts what it builds.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { objectNames } from "../../src/backends/kubernetes/names.ts";
import { checkCreateBody, checkTemplate, createBody, instanceSelector, ownLabels, type ServerIdentity } from "../../src/backends/hetzner/server-body.ts";
import { FAKE_HCLOUD_TOKEN, startFakeHetzner } from "../../scripts/fake-hetzner.mjs";

let fake: Awaited<ReturnType<typeof startFakeHetzner>>;
beforeAll(async () => void (fake = await startFakeHetzner()));
afterAll(() => fake.close());

const who = async (id: string, pool?: string): Promise<ServerIdentity> => {
  const names = await objectNames("gdr", id);
  return { name: names.name, label: names.label, pool, instance: "a1b2c3d4e5f60718", backend: "vm" };
};
const backendTemplate = { server_type: "cx22", image: "ubuntu-24.04", location: "fsn1", ssh_keys: ["ops"], labels: { team: "ci", "gdr-assignment": "x" } };

describe("the create-server body", () => {
  it("merges backend, pool and candidate in that order; the dispatcher's own fields win", async () => {
    const body = createBody(await who("gitea-1187-1", "large"), "#cloud-config\n", [backendTemplate, { server_type: "cx42", labels: { size: "large" } }], {
      server_type: "ccx13",
      location: "hel1",
    });
    expect(body).toEqual({
      server_type: "ccx13",
      image: "ubuntu-24.04",
      location: "hel1",
      ssh_keys: ["ops"],
      name: "gdr-gitea-1187-1",
      labels: {
        team: "ci",
        size: "large",
        "managed-by": "gitea-edge-dispatcher",
        "gdr-instance": "a1b2c3d4e5f60718",
        "gdr-backend": "vm",
        "gdr-assignment": "gitea-1187-1",
        "gdr-pool": "large",
      },
      user_data: "#cloud-config\n",
      start_after_create: true,
    });
    expect(checkCreateBody(body)).toEqual([]);
  });

  it("names a server by the Kubernetes rule: a hostname of at most 63 characters, distinct for distinct ids, a valid label value", async () => {
    const long = await who(`api-${"x".repeat(80)}`);
    const near = await who(`api-${"x".repeat(79)}y`);
    expect(long.name.length).toBeLessThanOrEqual(63);
    expect(long.name).not.toBe(near.name);
    const odd = await who("Weird_ID.with--dashes");
    expect(odd.name).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    for (const w of [long, odd]) expect(checkCreateBody(createBody(w, "", [backendTemplate]))).toEqual([]);
  });

  it("the fake API takes the bodies it builds, and lists them by this instance's selector only", async () => {
    const base = `${fake.url}/body`;
    const post = async (body: unknown) =>
      (await fetch(`${base}/servers`, { method: "POST", headers: { authorization: `Bearer ${FAKE_HCLOUD_TOKEN}` }, body: JSON.stringify(body) })).status;
    expect(await post(createBody(await who("gitea-1-1", "small"), "#cloud-config\n", [backendTemplate]))).toBe(201);
    expect(await post(createBody({ ...(await who("gitea-2-1")), instance: "another00000000" }, "", [backendTemplate]))).toBe(201);
    const mine = await fetch(`${base}/servers?label_selector=${encodeURIComponent(instanceSelector("a1b2c3d4e5f60718"))}`, {
      headers: { authorization: `Bearer ${FAKE_HCLOUD_TOKEN}` },
    });
    expect(((await mine.json()) as { servers: { name: string }[] }).servers.map((s) => s.name)).toEqual(["gdr-gitea-1-1"]);
  });

  it("refuses a template that sets the dispatcher's fields or labels, an unknown field, or a wrong type, naming the variable", () => {
    expect(checkTemplate("VM_TEMPLATE", { server_type: "cx22", firewalls: [{ firewall: 38 }], public_net: { enable_ipv4: false } })).toEqual([]);
    expect(checkTemplate("VM_TEMPLATE", { name: "x", user_data: "y" })).toEqual([
      'VM_TEMPLATE["name"] is set by the dispatcher, not by a template',
      'VM_TEMPLATE["user_data"] is set by the dispatcher, not by a template',
    ]);
    expect(checkTemplate("VM_TEMPLATE", { labels: { "managed-by": "me" } })).toEqual(['VM_TEMPLATE["labels"]["managed-by"] is the dispatcher\'s own label']);
    expect(checkTemplate("VM_TEMPLATE", { volumes: [1] })[0]).toContain('VM_TEMPLATE["volumes"] is not a field a template may set');
    expect(checkTemplate("VM_TEMPLATE", { firewalls: [{ firewall: "38" }] })).toEqual(["VM_TEMPLATE: firewalls[0].firewall must be integer"]);
    expect(checkTemplate("VM_TEMPLATE", { labels: { team: "-bad" } })[0]).toMatch(/^VM_TEMPLATE: labels\.team must match/);
    expect(checkTemplate("VM_TEMPLATE", [])).toEqual(["VM_TEMPLATE must be a JSON object (a partial create-server body)"]);
    // A body without a server type or image says where to set it.
    expect(checkCreateBody(createBody({ name: "n", label: "n", instance: "i", backend: "vm" }, "", []))).toEqual([
      "server_type is required: set it in the template or the pool's candidates",
      "image is required: set it in the template or the pool's candidates",
    ]);
    expect(ownLabels({ name: "n", label: "n", instance: "i", backend: "vm" })).not.toHaveProperty("gdr-pool");
  });
});
