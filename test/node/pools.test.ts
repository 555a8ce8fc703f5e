// Runner pools, first part (#21, in progress): RUNNER_POOLS parsed with every problem named by its
// path, RUNS_ON_ROUTES as pools, which pools can run a job, and schedule windows read in a time zone.
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import type { InvalidInput } from "../../src/model/errors.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { jobAssignment } from "../../src/forge/gitea/webhook.ts";
import { parsePools, poolsOfRoutes } from "../../src/pools/config.ts";
import { configProblems, giteaTestEnv, KUBERNETES_TEST_VARS } from "../harness/env.ts";
import { poolsFor, routeJob } from "../../src/pools/route.ts";
import { MAX_POOLS_PER_JOB } from "../../src/model/assignment.ts";
import { cronMatches, idleTarget, parseCron } from "../../src/pools/schedule.ts";

const small = {
  name: "small",
  backend: "pod",
  labels: ["ubuntu-latest:docker://node:20", "small"],
  maxRunners: 10,
  minIdle: 2,
  schedule: [{ cron: "* 8-17 * * mon-fri", timeZone: "Europe/Berlin", minIdle: 4 }],
};
const large = { name: "large", backend: "vm", labels: ["ubuntu-latest", "large"], priority: 200 };
const parse = (value: unknown, routes?: Parameters<typeof parsePools>[1]) => {
  const problems: string[] = [];
  const pools = parsePools(typeof value === "string" ? value : JSON.stringify(value), routes, problems);
  return { pools, problems };
};

describe("RUNNER_POOLS", () => {
  it("takes two pools, with defaults filled in", () => {
    const { pools, problems } = parse([small, large]);
    expect(problems).toEqual([]);
    expect(pools?.map((p) => [p.name, p.maxRunners, p.minIdle, p.priority, p.maxIdleMs, p.bootTimeoutMs, p.maxLifetimeMs])).toEqual([
      ["small", 10, 2, 100, 3_600_000, 600_000, 21_600_000],
      ["large", undefined, 0, 200, 3_600_000, 600_000, 21_600_000],
    ]);
  });

  it("names every problem by its path, all at once", () => {
    const { pools, problems } = parse([
      { ...small, name: "Small_1", minIddle: 3 },
      { ...small, minIdle: 11, schedule: [{ cron: "* 25 * * *", timeZone: "Mars/Olympus", minIdle: 12 }] },
      { ...large, name: "small", backend: "Lambda", maxLifetimeMs: 60_000 },
    ]);
    expect(pools).toBeUndefined();
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^RUNNER_POOLS\[0\]\["name"\] must be a DNS label/),
        expect.stringMatching(/^RUNNER_POOLS\[0\] .*minIddle/),
        expect.stringMatching(
          /^RUNNER_POOLS\[1\]\["schedule"\]\[0\]\["cron"\] is not a cron expression: hour: "25" is refused: Invalid value for hour: 25 \(pool "small"\)$/,
        ),
        expect.stringMatching(/^RUNNER_POOLS\[1\]\["schedule"\]\[0\]\["timeZone"\] must be an IANA time zone/),
        expect.stringMatching(/^RUNNER_POOLS\[2\]\["backend"\]/),
      ]),
    );
  });

  it("refuses near misses: a duplicate name, minIdle over the cap, a lifetime within the boot timeout", () => {
    expect(parse([small, { ...large, name: "small" }]).problems).toEqual(['RUNNER_POOLS[1]["name"] "small" is the name of pool 0 too (pool "small")']);
    expect(parse([{ ...small, minIdle: 11 }]).problems).toEqual(['RUNNER_POOLS[0]["minIdle"] must be at most maxRunners (10) (pool "small")']);
    expect(parse([{ ...small, minIdle: 10 }]).problems).toEqual([]);
    expect(parse([{ ...small, schedule: [{ cron: "* * * * *", minIdle: 11 }] }]).problems).toEqual([
      'RUNNER_POOLS[0]["schedule"][0]["minIdle"] must be at most maxRunners (10) (pool "small")',
    ]);
    expect(parse([{ ...large, bootTimeoutMs: 600_000, maxLifetimeMs: 600_000 }]).problems).toEqual([
      'RUNNER_POOLS[0]["maxLifetimeMs"] must be longer than bootTimeoutMs (600000) (pool "large")',
    ]);
    expect(parse([{ ...large, name: "constructor" }]).problems).toEqual([]);
    expect(parse('[{"name":"a","backend":"pod","labels":["x"],"__proto__":{"minIdle":5}}]').problems).toEqual([
      expect.stringMatching(/^RUNNER_POOLS\[0\] .*__proto__/),
    ]);
    expect(parse("[").problems).toEqual(["RUNNER_POOLS must be JSON"]);
    expect(parse([]).problems).toEqual(["RUNNER_POOLS must list at least one pool"]);
  });

  it("and RUNS_ON_ROUTES together are an error naming both; RUNS_ON_ROUTES alone is one pool per route", () => {
    const routes = [
      { backend: "pod" as const, labels: ["ubuntu-latest"] },
      { backend: "vm" as const, labels: ["ubuntu-latest", "vm"] },
    ];
    expect(parse([small], JSON.stringify(routes)).problems).toEqual([
      "RUNNER_POOLS and RUNS_ON_ROUTES are both set: use RUNNER_POOLS alone (each route is a pool)",
    ]);
    const { pools, problems } = parse("", JSON.stringify(routes));
    expect(problems).toEqual([]);
    expect(pools).toEqual(poolsOfRoutes(routes));
    expect(pools?.map((p) => [p.name, p.backend, p.minIdle, p.maxRunners, p.priority])).toEqual([
      ["route-0", "pod", 0, undefined, 0],
      ["route-1", "vm", 0, undefined, 1],
    ]);
  });
});

describe("which pools can run a job", () => {
  const pools = parse([large, small, { ...small, name: "small-b", priority: 100 }]).pools!;
  it("are those whose label names cover its runs-on, lowest priority first, in order among equals", () => {
    expect(poolsFor(pools, ["ubuntu-latest"]).map((p) => p.name)).toEqual(["small", "small-b", "large"]);
    expect(poolsFor(pools, ["ubuntu-latest", "large"]).map((p) => p.name)).toEqual(["large"]);
    expect(poolsFor(pools, ["small"]).map((p) => p.name)).toEqual(["small", "small-b"]);
  });
  it("are none for a label no pool has, a label's scheme part, or no runs-on at all", () => {
    expect(poolsFor(pools, ["ubuntu-latest", "gpu"])).toEqual([]);
    expect(poolsFor(pools, ["docker://node:20"])).toEqual([]);
    expect(poolsFor(pools, [])).toEqual([]);
  });
  it("are at most 16 for a job that more can run, the first 16 in the order tried; 16 are all kept", () => {
    const many = (n: number) =>
      parse(Array.from({ length: n }, (_, i) => ({ name: `p${i}`, backend: "pod", labels: ["ubuntu-latest"], priority: 100 + (n - i) }))).pools!;
    const routed = routeJob(many(20), ["ubuntu-latest"])!;
    expect(routed.pools).toEqual(Array.from({ length: 16 }, (_, i) => `p${19 - i}`));
    expect(routeJob(many(16), ["ubuntu-latest"])!.pools).toHaveLength(16);
    expect(MAX_POOLS_PER_JOB).toBe(16);
  });
});

describe("schedule windows", () => {
  const at = (iso: string) => new Date(iso);
  it("are read in their time zone, summer time included", () => {
    const office = parseCron("* 8-17 * * 1-5");
    // Wednesday 2 December 2026, Berlin is UTC+1.
    expect(cronMatches(office, at("2026-12-02T06:59:59Z"), "Europe/Berlin")).toBe(false);
    expect(cronMatches(office, at("2026-12-02T07:00:00Z"), "Europe/Berlin")).toBe(true);
    expect(cronMatches(office, at("2026-12-02T16:59:59Z"), "Europe/Berlin")).toBe(true);
    expect(cronMatches(office, at("2026-12-02T17:00:00Z"), "Europe/Berlin")).toBe(false);
    // The same instants read in UTC: the zone decides.
    expect(cronMatches(office, at("2026-12-02T07:00:00Z"), "UTC")).toBe(false);
    expect(cronMatches(office, at("2026-12-02T17:00:00Z"), "UTC")).toBe(true);
    // 1 July 2026, Berlin is UTC+2.
    expect(cronMatches(office, at("2026-07-01T06:00:00Z"), "Europe/Berlin")).toBe(true);
    expect(cronMatches(office, at("2026-07-01T05:59:00Z"), "Europe/Berlin")).toBe(false);
    // Saturday 5 December 2026.
    expect(cronMatches(office, at("2026-12-05T10:00:00Z"), "Europe/Berlin")).toBe(false);
  });

  it("cross midnight as a list of hours, and the weekday is the zone's own", () => {
    const night = parseCron("* 22-23,0-5 * * *");
    // 23:30 on 2 December in New York is 04:30 UTC on 3 December.
    expect(cronMatches(night, at("2026-12-03T04:30:00Z"), "America/New_York")).toBe(true);
    expect(cronMatches(night, at("2026-12-03T10:59:00Z"), "America/New_York")).toBe(true);
    expect(cronMatches(night, at("2026-12-03T11:00:00Z"), "America/New_York")).toBe(false);
    expect(cronMatches(night, at("2026-12-03T02:59:00Z"), "America/New_York")).toBe(false);
    // Friday 23:30 in New York is already Saturday in UTC: a Friday window holds by New York's calendar.
    const fridayNight = parseCron("* 22-23 * * fri");
    expect(cronMatches(fridayNight, at("2026-12-05T04:30:00Z"), "America/New_York")).toBe(true);
    expect(cronMatches(fridayNight, at("2026-12-05T04:30:00Z"), "UTC")).toBe(false);
  });

  it("read Sunday as 0 or 7, steps, names, and either day field when both are restricted", () => {
    const sunday = at("2026-12-06T12:00:00Z");
    expect(cronMatches(parseCron("* * * * 0"), sunday, "UTC")).toBe(true);
    expect(cronMatches(parseCron("* * * * 7"), sunday, "UTC")).toBe(true);
    expect(cronMatches(parseCron("* * * * SUN"), sunday, "UTC")).toBe(true);
    expect(cronMatches(parseCron("*/15 * * * *"), at("2026-12-06T12:45:00Z"), "UTC")).toBe(true);
    expect(cronMatches(parseCron("*/15 * * * *"), at("2026-12-06T12:44:00Z"), "UTC")).toBe(false);
    // A step from a value runs to the field's end: 5, 20, 35 and 50, nothing else.
    const fromFive = parseCron("5/15 * * * *");
    const minutes = (cron: ReturnType<typeof parseCron>) =>
      Array.from({ length: 60 }, (_, m) => m).filter((m) => cronMatches(cron, new Date(Date.UTC(2026, 11, 6, 12, m)), "UTC"));
    expect(minutes(fromFive)).toEqual([5, 20, 35, 50]);
    expect(cronMatches(fromFive, at("2026-12-06T12:50:00Z"), "UTC")).toBe(true);
    expect(cronMatches(fromFive, at("2026-12-06T12:51:00Z"), "UTC")).toBe(false);
    const hours = Array.from({ length: 24 }, (_, h) => h).filter((h) => cronMatches(parseCron("* 10-20/5 * * *"), new Date(Date.UTC(2026, 11, 6, h)), "UTC"));
    expect(hours).toEqual([10, 15, 20]);
    // Lists and names of weekdays, as crontab(5) writes them.
    expect(cronMatches(parseCron("* * * * mon,wed,fri"), at("2026-12-02T12:00:00Z"), "UTC")).toBe(true);
    expect(cronMatches(parseCron("* * * * mon,wed,fri"), at("2026-12-03T12:00:00Z"), "UTC")).toBe(false);
    expect(cronMatches(parseCron("* * * * MON-FRI"), sunday, "UTC")).toBe(false);
    expect(cronMatches(parseCron("* * * dec *"), sunday, "UTC")).toBe(true);
    // The 1st of the month or a Monday: Sunday the 6th is neither, Tuesday the 1st is.
    const firstOrMonday = parseCron("* * 1 * 1");
    expect(cronMatches(firstOrMonday, sunday, "UTC")).toBe(false);
    expect(cronMatches(firstOrMonday, at("2026-12-01T12:00:00Z"), "UTC")).toBe(true);
    expect(cronMatches(firstOrMonday, at("2026-12-07T12:00:00Z"), "UTC")).toBe(true);
  });

  it("refuse what is not cron, naming the field", () => {
    for (const [text, message] of [
      ["* * * *", /must have 5 fields/],
      ["60 * * * *", /^minute: "60" is refused: Invalid value for minute: 60$/],
      ["* 5-1 * * *", /^hour: "5-1" is refused: .*\(a window across midnight is a list: 22-23,0-5\)$/],
      ["*/0 * * * *", /^minute: "\*\/0" is refused: .*stepping/],
      ["* * * * funday", /^day of week: "funday"/],
      ["* * 0 * *", /^day of month: "0"/],
      ["1,,2 * * * *", /^minute: "1,,2" is refused/],
      ["* 24 * * *", /^hour: "24"/],
      ["* * * * 8", /^day of week: "8"/],
      ["* * * * * *", /must have 5 fields/],
    ] as const)
      expect(() => parseCron(text), text).toThrow(message);
  });

  it("set the warm target: the first active window's, else the pool's own", () => {
    const pool = parse([
      {
        ...small,
        schedule: [
          { cron: "* 8-17 * * 1-5", timeZone: "Europe/Berlin", minIdle: 4 },
          { cron: "* * * * *", minIdle: 0 },
        ],
      },
    ]).pools![0]!;
    expect(idleTarget(pool, at("2026-12-02T09:00:00Z"))).toBe(4);
    expect(idleTarget(pool, at("2026-12-02T20:00:00Z"))).toBe(0);
    expect(idleTarget({ ...pool, schedule: [] }, at("2026-12-02T20:00:00Z"))).toBe(2);
  });
});

describe("RUNNER_POOLS in the configuration", () => {
  const k8s = KUBERNETES_TEST_VARS;
  const env = (pools: unknown, extra: Record<string, unknown> = {}): Record<string, string> => {
    const { RUNS_ON_ROUTES: _routes, ...base } = giteaTestEnv("ws://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", { ...k8s, ...extra });
    return { ...base, RUNNER_POOLS: JSON.stringify(pools) };
  };
  const problems = configProblems;
  const podTemplate = {
    spec: { nodeSelector: { "node.example.org/size": "small" }, containers: [{ name: "runner", resources: { limits: { cpu: "2", memory: "4Gi" } } }] },
  };
  const vmTemplate = { spec: { domain: { cpu: { cores: 8 }, resources: { requests: { memory: "16Gi" } } } } };

  it("takes pools with their own Pod and VMI shapes; a job is routed to the pools that can run it", () => {
    const config = loadConfig(
      env([
        { ...small, template: podTemplate },
        { ...large, template: vmTemplate },
      ]),
    );
    expect(config.pools.map((p) => p.name)).toEqual(["small", "large"]);
    const job = { id: 7, run_id: 3, labels: ["ubuntu-latest"] };
    expect(jobAssignment(config.pools, job, "acme/widgets", 1)).toMatchObject({ backend: "pod", labels: small.labels, pools: ["small", "large"] });
    expect(jobAssignment(config.pools, { ...job, labels: ["large"] }, "acme/widgets", 1)).toMatchObject({ backend: "vm", pools: ["large"] });
    expect(jobAssignment(config.pools, { ...job, labels: ["gpu"] }, "acme/widgets", 1)).toBeUndefined();
  });

  it("refuses a template that would make an invalid Pod or VMI, naming the pool and the field", () => {
    const wrongPod = { spec: { containers: [{ name: "runner", imagePullPolicyy: "Always" }] } };
    expect(problems(env([{ ...small, template: wrongPod }, large]))).toEqual([
      'RUNNER_POOLS[0]["template"] would make an invalid Pod: spec.containers[0].imagePullPolicyy is not a field of this object (pool "small")',
    ]);
    const wrongVm = { spec: { domain: { cpu: { cores: "8" } } } };
    expect(problems(env([small, { ...large, template: wrongVm }]))).toEqual([
      'RUNNER_POOLS[1]["template"] would make an invalid VirtualMachineInstance: spec.domain.cpu.cores must be integer (pool "large")',
    ]);
    // The near miss: the same field, spelt right, is fine; so is a label or a field named like a prototype key.
    expect(problems(env([{ ...small, template: { spec: { containers: [{ name: "runner", imagePullPolicy: "Always" }] } } }, large]))).toEqual([]);
    expect(problems(env([{ ...small, template: { spec: { constructor: 1 } } }, large]))).toEqual([
      'RUNNER_POOLS[0]["template"] would make an invalid Pod: spec.constructor is not a field of this object (pool "small")',
    ]);
    // POD_TEMPLATE's own mistakes are refused at load, pools or not; a pool's template merged over it is checked too.
    expect(problems(env([small, large], { POD_TEMPLATE: JSON.stringify({ spec: { hostNetwork: "yes" } }) }))).toEqual([
      "POD_TEMPLATE would make an invalid Pod (pod backend): spec.hostNetwork must be boolean",
    ]);
    expect(problems(env([{ ...small, template: podTemplate }, large], { POD_TEMPLATE: JSON.stringify({ spec: { hostNetwork: "yes" } }) }))).toEqual([
      "POD_TEMPLATE would make an invalid Pod (pod backend): spec.hostNetwork must be boolean",
      'RUNNER_POOLS[0]["template"] would make an invalid Pod: spec.hostNetwork must be boolean (pool "small")',
    ]);
  });

  it("refuses a pool on a disabled backend, more warm runners than the backend holds, and pools without Gitea", () => {
    expect(problems(env([small, large], { CAPACITY_VM: "0" }))).toEqual(['RUNNER_POOLS[1]["backend"] is vm, which is disabled (CAPACITY_VM=0) (pool "large")']);
    expect(problems(env([{ ...small, maxRunners: 20, schedule: [{ cron: "* * * * *", minIdle: 11 }] }, large], { CAPACITY_POD: "10" }))).toEqual([
      'RUNNER_POOLS[0]["minIdle"] asks for 11 warm runners, more than CAPACITY_POD (10) (pool "small")',
    ]);
    expect(problems(env([{ ...small, maxRunners: 20, schedule: [{ cron: "* * * * *", minIdle: 10 }] }, large], { CAPACITY_POD: "10" }))).toEqual([]);
    const { GITEA_URL: _g, ...noGitea } = env([small]);
    expect(problems({ ...noGitea, POD_DRIVER: "http", VM_DRIVER: "http", CAPACITY_VM: "0" })).toEqual([
      "RUNNER_POOLS needs the Gitea integration (GITEA_URL): a pool's runners are registered with Gitea",
    ]);
    const { RUNNER_POOLS: _p, ...neither } = env([small]);
    expect(problems(neither)).toEqual(["RUNNER_POOLS (or the older RUNS_ON_ROUTES) is required with GITEA_URL"]);
  });

  it("an assignment from the API is refused, naming the field, when it names an unknown pool, a first pool on another backend, or sets warm", async () => {
    const config = loadConfig(env([small, large]));
    const d = createDispatcher({ config, sink: { event: () => undefined, summary: () => undefined, error: () => undefined } });
    const base = { version: 1, id: "api-1", backend: "pod", labels: ["ubuntu-latest"] };
    const fields = async (body: object) => ((await publishAssignment(d, body).catch((e: unknown) => e)) as InvalidInput).fields;
    expect(await fields({ ...base, pools: ["small", "nope"] })).toEqual([{ field: "pools.1", message: "no pool nope is configured (RUNNER_POOLS)" }]);
    expect(await fields({ ...base, pools: ["large"] })).toEqual([{ field: "pools.0", message: "pool large runs on vm, not on the assignment's backend pod" }]);
    expect(await fields({ ...base, pools: ["small"], warm: true })).toEqual([
      { field: "warm", message: "is set by the dispatcher's own pool maintenance only" },
    ]);
    expect(await fields({ ...base, pools: ["Small"] })).toEqual([expect.objectContaining({ field: "pools.0" })]);
  });

  it("an assignment from the API that names a server to rebuild (reuse) is refused, naming the field, warm or not", async () => {
    const config = loadConfig(env([small, large]));
    const d = createDispatcher({ config, sink: { event: () => undefined, summary: () => undefined, error: () => undefined } });
    const base = { version: 1, id: "api-2", backend: "pod", labels: ["ubuntu-latest"], pools: ["small"] };
    const refusal = { field: "reuse", message: "is set by the dispatcher's own pool maintenance only, on a warm runner" };
    const fields = async (body: object, warm = false) => ((await publishAssignment(d, body, { warm }).catch((e: unknown) => e)) as InvalidInput).fields;
    expect(await fields({ ...base, reuse: { server: 42 } })).toEqual([refusal]);
    // Maintenance's own publish, of a job's runner (not warm): refused too.
    expect(await fields({ ...base, reuse: { server: 42 } }, true)).toEqual([refusal]);
    expect(await fields({ ...base, reuse: { server: 0 } })).toEqual([expect.objectContaining({ field: "reuse.server" })]);
  });
});
