// Every variable that holds JSON is read alike whether wrangler.jsonc writes it as a JSON value
// (wrangler hands the Worker the value) or as a string holding it; invalid is refused both ways,
// naming the variable and the field, and nothing is dropped.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { JSON_VARIABLES } from "../../src/app/config-schema.ts";
import { ConfigError, loadConfig, loadProvisionConfig, type Config } from "../../src/app/config.ts";
import { giteaTestEnv, KUBERNETES_TEST_VARS } from "../harness/env.ts";

/** A Gitea configuration on both Kubernetes drivers; its routes go when `variable` sets pools. */
const base = (variable?: string): Record<string, unknown> => {
  const { RUNS_ON_ROUTES: routes, ...env } = giteaTestEnv("ws://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", KUBERNETES_TEST_VARS);
  return variable === "RUNNER_POOLS" ? env : { ...env, RUNS_ON_ROUTES: routes };
};

const name = fc.stringMatching(/^[a-z]([a-z0-9-]{0,10}[a-z0-9])?$/);
const label = fc.stringMatching(/^[a-z][a-z0-9.-]{0,15}$/);
const pools = fc.uniqueArray(
  fc.record(
    {
      name,
      backend: fc.constantFrom("pod", "vm"),
      labels: fc.uniqueArray(label, { minLength: 1, maxLength: 3 }),
      maxRunners: fc.integer({ min: 3, max: 50 }),
      minIdle: fc.integer({ min: 0, max: 3 }),
    },
    { requiredKeys: ["name", "backend", "labels"] },
  ),
  { minLength: 1, maxLength: 4, selector: (p) => p.name },
);
const routes = fc.array(fc.record({ backend: fc.constantFrom("pod", "vm"), labels: fc.uniqueArray(label, { minLength: 1, maxLength: 3 }) }), {
  minLength: 1,
  maxLength: 3,
});
const quotas = fc.record(
  {
    default: fc.record({ owner: fc.nat(100), repository: fc.nat(100) }, { requiredKeys: [] }),
    owners: fc.dictionary(
      fc.stringMatching(/^[a-z][a-z0-9]{0,10}$/),
      fc.record({ limit: fc.nat(50), weight: fc.integer({ min: 1, max: 1000 }) }, { requiredKeys: [] }),
      { maxKeys: 4 },
    ),
  },
  { requiredKeys: [] },
);
const kv = fc.dictionary(fc.stringMatching(/^[a-z][a-z0-9]{0,8}$/), fc.stringMatching(/^[a-z0-9]{1,10}$/), { maxKeys: 3 });
const podTemplate = fc.record(
  { metadata: fc.record({ labels: kv }), spec: fc.record({ nodeSelector: kv, hostNetwork: fc.boolean() }, { requiredKeys: [] }) },
  { requiredKeys: [] },
);
const vmTemplate = fc.record({ spec: fc.record({ domain: fc.record({ cpu: fc.record({ cores: fc.integer({ min: 1, max: 64 }) }) }) }) });

const backendName = fc.stringMatching(/^[a-z][a-z0-9]{0,8}$/).filter((n) => n !== "pod" && n !== "vm");
const named = fc.uniqueArray(fc.record({ name: backendName, driver: fc.constantFrom("kubernetes", "kubevirt"), capacity: fc.integer({ min: 0, max: 50 }) }), {
  minLength: 1,
  maxLength: 4,
  selector: (b) => b.name,
});

/** Each JSON variable: valid values, and invalid ones with the field that must be named. */
const CASES: Record<string, { valid: fc.Arbitrary<unknown>; invalid: fc.Arbitrary<[unknown, string]>; extra?: Record<string, unknown> }> = {
  RUNNER_POOLS: { valid: pools, invalid: pools.map((p) => [[...p, { ...p[0], name: "zz-other", maxRunners: 0 }], `RUNNER_POOLS[${p.length}]["maxRunners"]`]) },
  RUNS_ON_ROUTES: { valid: routes, invalid: routes.map((r) => [[...r, { backend: "gpu", labels: ["x"] }], `RUNS_ON_ROUTES[${r.length}]["backend"]`]) },
  QUOTAS: {
    valid: quotas,
    invalid: quotas.map((q) => [{ ...q, owners: { ...q.owners, constructor: { weight: 0 } } }, 'QUOTAS["owners"]["constructor"]["weight"]']),
  },
  POD_TEMPLATE: {
    valid: podTemplate,
    invalid: podTemplate.map((t) => [
      { ...t, spec: { ...t.spec, hostNetwork: "yes" } },
      "POD_TEMPLATE would make an invalid Pod (pod backend): spec.hostNetwork",
    ]),
  },
  BACKENDS: { valid: named, invalid: named.map((b) => [[...b, { name: "Pod-1", driver: "http", capacity: 1 }], `BACKENDS[${b.length}]["name"]`]) },
  VM_TEMPLATE: {
    valid: vmTemplate,
    invalid: fc
      .integer({ min: 1, max: 64 })
      .map((n) => [
        { spec: { domain: { cpu: { cores: String(n) } } } },
        "VM_TEMPLATE would make an invalid VirtualMachineInstance (vm backend): spec.domain.cpu.cores",
      ]),
  },
};

function load(env: Record<string, unknown>): { config?: Config; problems: string[] } {
  try {
    return { config: loadConfig(env), problems: [] };
  } catch (err) {
    if (err instanceof ConfigError) return { problems: err.problems };
    throw err;
  }
}
const read = (c: Config | undefined) => c && { pools: c.pools, quotas: c.quotas, kubernetes: c.kubernetes, backends: c.backends };

describe("JSON variables, written as a string or as a JSON value", () => {
  it("covers every variable the schema calls JSON", () => {
    expect(Object.keys(CASES).sort()).toEqual([...JSON_VARIABLES].sort());
  });

  describe.each(Object.entries(CASES))("%s", (variable, c) => {
    it("a valid value is read the same both ways, with nothing dropped", () => {
      fc.assert(
        fc.property(c.valid, (value) => {
          const asText = load({ ...base(variable), [variable]: JSON.stringify(value) });
          const asValue = load({ ...base(variable), [variable]: value });
          expect(asText.problems).toEqual([]);
          expect(read(asValue.config)).toEqual(read(asText.config));
          // Not dropped: the value is there (a template in the driver settings, pools, quotas).
          const got = read(asValue.config)!;
          if (variable === "POD_TEMPLATE") expect(got.kubernetes?.podTemplate).toEqual(value);
          if (variable === "VM_TEMPLATE") expect(got.kubernetes?.vmTemplate).toEqual(value);
          if (variable === "RUNNER_POOLS" || variable === "RUNS_ON_ROUTES") expect(got.pools).toHaveLength((value as unknown[]).length);
          if (variable === "BACKENDS") expect(got.backends).toHaveLength(2 + (value as { capacity: number }[]).filter((b) => b.capacity > 0).length);
        }),
        { numRuns: 40 },
      );
    });

    it("an invalid value is refused both ways, naming the variable and the field", () => {
      fc.assert(
        fc.property(c.invalid, ([value, field]) => {
          const asText = load({ ...base(variable), [variable]: JSON.stringify(value) });
          const asValue = load({ ...base(variable), [variable]: value });
          expect(asValue.config).toBeUndefined();
          expect(asValue.problems).toEqual(asText.problems);
          expect(
            asValue.problems.some((p) => p.startsWith(field)),
            asValue.problems.join("\n"),
          ).toBe(true);
        }),
        { numRuns: 25 },
      );
    });
  });

  it("provisioning reads RUNNER_POOLS as a value too: a pool's slots are provisioned either way", () => {
    const pool = [{ name: "big", backend: "pod", labels: ["x"], maxRunners: 3 }];
    const env = { NATS_URL: "ws://127.0.0.1:1", CAPACITY_POD: 7, CAPACITY_VM: 0, FAIR_SHARE: "off" };
    expect(loadProvisionConfig({ ...env, RUNNER_POOLS: pool }).pools).toEqual(loadProvisionConfig({ ...env, RUNNER_POOLS: JSON.stringify(pool) }).pools);
    expect(loadProvisionConfig({ ...env, RUNNER_POOLS: pool }).pools.map((p) => p.maxRunners)).toEqual([3]);
    expect(loadProvisionConfig({ ...env, RUNNER_POOLS: pool }).backends).toEqual([{ backend: "pod", capacity: 7 }]);
  });

  it("numbers and booleans are read as their text; JSON where none belongs is refused, naming the variable", () => {
    const numbers = load({ ...base(), CAPACITY_POD: 3, EAGER_RECONCILE: false });
    expect(numbers.config?.capacity.pod).toBe(3);
    expect(numbers.config?.eagerReconcile).toBe(false);
    for (const v of [{ value: 3 }, [3]]) {
      expect(load({ ...base(), CAPACITY_POD: v }).problems).toContain(
        "CAPACITY_POD must be a string, number or boolean, not JSON (only RUNNER_POOLS, QUOTAS, RUNS_ON_ROUTES, POD_TEMPLATE, VM_TEMPLATE, BACKENDS hold JSON)",
      );
      // A secret written as JSON is refused too, never dropped into "unset".
      expect(load({ ...base(), NATS_TOKEN: v }).problems.some((p) => p.startsWith("NATS_TOKEN must be a string"))).toBe(true);
    }
  });
});

describe("a template is refused at load", () => {
  const k = (extra: Record<string, unknown>) => load({ ...base(), ...extra }).problems;
  it("when it is not a JSON object, written either way", () => {
    for (const t of ["[1]", [1], "3", 3, "{not json", true]) expect(k({ POD_TEMPLATE: t })).toContain("POD_TEMPLATE must be a JSON object (a partial Pod)");
    expect(k({ VM_TEMPLATE: "[]" })).toContain(
      "VM_TEMPLATE must be a JSON object (a partial VirtualMachineInstance, a partial Hetzner create-server body, or a partial EC2 RunInstances request)",
    );
  });
  it("when it would make an invalid workload, and not when the field is spelt right", () => {
    expect(k({ POD_TEMPLATE: { spec: { containers: [{ name: "runner", imagePullPolicy: 5 }] } } })).toEqual([
      "POD_TEMPLATE would make an invalid Pod (pod backend): spec.containers[0].imagePullPolicy must be string",
    ]);
    expect(k({ POD_TEMPLATE: { spec: { containers: [{ name: "runner", imagePullPolicy: "Always" }] } } })).toEqual([]);
    expect(k({ POD_TEMPLATE: { spec: { constructor: 1 } } })).toEqual([
      "POD_TEMPLATE would make an invalid Pod (pod backend): spec.constructor is not a field of this object",
    ]);
  });
  it("when no enabled backend would read it, rather than ignored", () => {
    expect(k({ VM_DRIVER: "kubernetes", VM_TEMPLATE: { spec: {} } })).toContain(
      "VM_TEMPLATE is set, but no enabled backend uses the kubevirt, hetzner or ec2 driver (POD_DRIVER or VM_DRIVER) without a template of its own, so it would be ignored: unset it",
    );
    expect(k({ CAPACITY_VM: 0, VM_TEMPLATE: { spec: {} } }).some((p) => p.startsWith("VM_TEMPLATE is set"))).toBe(true);
    expect(k({ CAPACITY_VM: 1, VM_TEMPLATE: { spec: {} } })).toEqual([]);
  });
});
