// Backends as a list (BACKENDS): a named backend beside pod and vm gets its own subject, consumer
// and slot stream; names follow one rule, checked at load; pools spill over to a named backend as
// between pod and vm; the variables of before describe pod and vm unchanged; and a backend removed
// while jobs wait in it is named by /healthz and by provisioning, not dropped.
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { loadConfig, loadProvisionConfig } from "../../src/app/config.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { withNats } from "../../src/nats/connection.ts";
import { capacityOf } from "../../src/model/states.ts";
import { provision } from "../../src/nats/layout.ts";
import { inspect } from "../../src/nats/layout-inspect.ts";
import { configProblems, poolsTestEnv, provisionEnv, testEnv, TEST_SECRETS } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };
const problems = configProblems;
const gpu = (extra: object = {}) => ({ name: "gpu", driver: "http", capacity: 3, url: `${backendUrl}/gpu-${Math.random().toString(36).slice(2)}`, ...extra });

describe("named backends", () => {
  it("a configuration from before reads as it did: pod and vm from their own variables, nothing else", () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_VM: 2, VM_BACKEND_URL: "http://127.0.0.1:9" });
    const config = loadConfig(env);
    expect(config.backends.map((b) => [b.backend, b.driver, b.capacity])).toEqual([
      ["pod", "http", 10],
      ["vm", "http", 2],
    ]);
    expect({ ...config.capacity }).toEqual({ pod: 10, vm: 2 });
    expect(loadProvisionConfig(env).backends).toEqual([
      { backend: "pod", capacity: 10 },
      { backend: "vm", capacity: 2 },
    ]);
  });

  it("BACKENDS adds backends by name, with their driver, capacity and token; a capacity of 0 disables one", () => {
    const env = {
      ...testEnv(nats, backendUrl),
      BACKENDS: JSON.stringify([gpu(), { name: "arm", driver: "http", capacity: 0, url: "http://127.0.0.1:9" }]),
      GPU_BACKEND_TOKEN: "gpu-token",
    };
    const config = loadConfig(env);
    expect(config.backends.map((b) => b.backend)).toEqual(["pod", "gpu"]);
    expect(config.backends[1]).toMatchObject({ driver: "http", capacity: 3, token: "gpu-token" });
    expect(config.capacity.gpu).toBe(3);
    // Read by name, an unconfigured name is nobody's capacity, even one like a prototype key.
    expect(capacityOf(config.capacity, "gpu")).toBe(3);
    expect(capacityOf(config.capacity, "constructor")).toBe(0);
    expect(capacityOf(config.capacity, "arm")).toBe(0);
  });

  it("names follow one rule, checked at load, each problem naming the entry", () => {
    const of = (backends: unknown[]) => problems({ ...testEnv(nats, backendUrl), BACKENDS: JSON.stringify(backends) });
    expect(of([gpu({ name: "Gpu" })])).toEqual(['BACKENDS[0]["name"] must be 1-16 lowercase letters and digits, starting with a letter']);
    expect(of([gpu({ name: "gpu-1" })])[0]).toMatch(/^BACKENDS\[0\]\["name"\] must be/);
    expect(of([gpu({ name: "a".repeat(17) })])[0]).toMatch(/^BACKENDS\[0\]\["name"\] must be/);
    expect(of([gpu({ name: "__proto__" })])[0]).toMatch(/^BACKENDS\[0\]\["name"\] must be/);
    expect(of([gpu({ name: "pod" })])).toEqual([
      'BACKENDS[0]["name"] is pod or vm, which CAPACITY_POD, POD_DRIVER, … describe: give this backend another name',
    ]);
    expect(of([gpu(), gpu()])).toEqual(['BACKENDS[1]["name"] gpu is named twice']);
    expect(of([gpu({ url: undefined })])).toEqual(['BACKENDS[0]["url"] is required with the http driver (backend gpu)']);
    expect(of([gpu({ driver: "lambda" })])[0]).toMatch(/^BACKENDS\[0\]\["driver"\] must be one of http, kubernetes, kubevirt/);
    // The near misses are taken: 16 characters, digits after the first letter, a name like a prototype key.
    expect(of([gpu({ name: "a".repeat(16) }), gpu({ name: "gpu2" }), gpu({ name: "constructor" })])).toEqual([]);
  });

  it("a job spills from a full pool on pod to a pool on a named backend; each backend has its own consumer and slots", async () => {
    const env = {
      ...poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [
        { name: "small", backend: "pod", labels: ["ubuntu-latest"], maxRunners: 1 },
        { name: "big", backend: "gpu", labels: ["ubuntu-latest"], maxRunners: 5, priority: 200 },
      ]),
      CAPACITY_VM: "0",
      BACKENDS: JSON.stringify([gpu()]),
      GPU_BACKEND_TOKEN: TEST_SECRETS.BACKEND_TOKEN,
    };
    const config = await provisionEnv(env);
    await withNats(config, async (h) => {
      const jsm = await jetstreamManager(h.nc);
      expect((await jsm.consumers.info(config.stream, "gpu")).config.filter_subject).toBe(`${config.subjectBase}.gpu`);
      expect((await jsm.streams.info(`${config.stream}_slots_gpu`)).config.max_msgs).toBe(3);
      expect((await jsm.streams.info(`${config.stream}_pool_big`)).config.max_msgs).toBe(5);
    });
    const placed = await createDispatcher({ config, sink: silent }).withState(({ admission }) =>
      admission.placeMany(
        ["a", "b", "c"].map((id) => ({
          id,
          places: [
            { backend: "pod", pool: "small" },
            { backend: "gpu", pool: "big" },
          ],
        })),
      ),
    );
    expect([...placed.admitted.values()].map((p) => p.backend).sort()).toEqual(["gpu", "gpu", "pod"]);
  });

  it("an assignment for a named backend is published to its subject; for one no configuration names, refused naming the field", async () => {
    const env = { ...testEnv(nats, backendUrl), BACKENDS: JSON.stringify([gpu()]) };
    const config = await provisionEnv(env);
    const d = createDispatcher({ config, sink: silent });
    const body = (id: string, backend: string) => ({ version: 1, id, backend, labels: ["x"] });
    await expect(publishAssignment(d, body("g-1", "gpu"))).resolves.toBeDefined();
    for (const backend of ["tpu", "constructor", "vm"])
      await expect(publishAssignment(d, body(`x-${backend}`, backend))).rejects.toMatchObject({
        fields: [{ field: "backend", message: expect.stringMatching(new RegExp(`^backend ${backend} is disabled`)) }],
      });
  });

  it("a backend removed while jobs wait in it is named by /healthz and by provisioning", async () => {
    const base = testEnv(nats, backendUrl);
    const env = { ...base, BACKENDS: JSON.stringify([gpu()]) };
    const config = await provisionEnv(env);
    const d = createDispatcher({ config, sink: silent });
    await publishAssignment(d, { version: 1, id: "left-1", backend: "gpu", labels: ["x"] });
    const without = loadConfig(testEnv(nats, backendUrl, { ASSIGNMENT_STREAM: base.ASSIGNMENT_STREAM, ASSIGNMENT_SUBJECT_BASE: base.ASSIGNMENT_SUBJECT_BASE }));
    const named = `consumer gpu holds 1 jobs of backend gpu, which the configuration no longer names (BACKENDS, CAPACITY_*): name it again until they are done, or end them`;
    await withNats(without, async (h) => {
      expect((await inspect(h, without)).problems).toContain(named);
      expect(await provision(h, without)).toContain(named);
    });
  });
});
