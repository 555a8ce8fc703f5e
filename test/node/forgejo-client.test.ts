// The Forgejo 15 REST client (forge/forgejo/client.ts) against Forgejo's own API description:
// every call is an operation of forgejo-v15.json in every scope, the registration body validates
// against RegisterRunnerOptions (unknown fields refused), and what the handlers answer beyond the
// swagger (a `null` job list, 422, 404 on a deleted runner) is handled, never a 500 of ours.
import { readFileSync } from "node:fs";
import { Ajv } from "ajv";
import { describe, expect, it } from "vitest";
import { createForgejoClient, ForgejoError, type ForgejoScope } from "../../src/forge/forgejo/client.ts";

const doc = JSON.parse(readFileSync(new URL("../fixtures/upstream-schemas/forgejo-v15.json", import.meta.url), "utf8")) as {
  paths: Record<string, Record<string, { parameters?: { in: string; schema?: { $ref: string } }[] }>>;
  definitions: Record<string, object>;
};
const TOKEN = "forgejo-api-token-0123456789";
const SCOPES: ForgejoScope[] = [{ kind: "admin" }, { kind: "org", org: "acme" }, { kind: "repo", owner: "acme", repo: "widgets.v2" }, { kind: "user" }];

/** The swagger operation a call is, or undefined. */
function operationOf(method: string, path: string) {
  for (const [template, ops] of Object.entries(doc.paths)) {
    if (new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(path) && ops[method.toLowerCase()]) return ops[method.toLowerCase()];
  }
  return undefined;
}

const ajv = new Ajv({ strict: false, allErrors: true });
const registerOptions = ajv.compile({ ...doc.definitions.RegisterRunnerOptions, additionalProperties: false });

type Call = { method: string; path: string; body: string | undefined; authorization: string | null };
function fakeForgejo(answer: (call: Call) => Response) {
  const calls: Call[] = [];
  const fetch = (async (url: string, init: RequestInit) => {
    const call = {
      method: String(init.method),
      path: new URL(url).pathname,
      body: init.body as string | undefined,
      authorization: new Headers(init.headers).get("authorization"),
    };
    calls.push(call);
    return answer(call);
  }) as typeof globalThis.fetch;
  return { calls, client: createForgejoClient({ url: "https://forgejo.example.org/", apiToken: TOKEN, timeoutMs: 1_000, fetch }) };
}

const job = {
  id: 41,
  attempt: 1,
  handle: "3f0c7a2e-5d2b-4a51-9a77-0d1f6b1c2d3e",
  name: "build",
  needs: null,
  owner_id: 2,
  repo_id: 7,
  runs_on: ["docker"],
  status: "waiting",
  task_id: 0,
};

describe("the Forgejo client", () => {
  it("calls only operations of Forgejo 15, in every scope, with the token header and a registration body Forgejo accepts", async () => {
    const { calls, client } = fakeForgejo((c) => {
      if (c.method === "POST") return Response.json({ id: 12, uuid: "9b2f7a8e-0c1d-4e2f-8a3b-4c5d6e7f8a9b", token: "runner-token" }, { status: 201 });
      if (c.method === "DELETE") return new Response(null, { status: 204 });
      return Response.json([job]);
    });
    for (const scope of SCOPES) {
      expect(await client.jobs(scope)).toEqual([job]);
      expect(await client.registerRunner(scope, "gdr-forgejo-41-1")).toEqual({ id: 12, uuid: "9b2f7a8e-0c1d-4e2f-8a3b-4c5d6e7f8a9b", token: "runner-token" });
      await client.deleteRunner(scope, 12);
    }
    expect(calls).toHaveLength(12);
    for (const c of calls) {
      expect(c.path.startsWith("/api/v1/"), c.path).toBe(true);
      expect(operationOf(c.method, c.path.slice("/api/v1".length)), `${c.method} ${c.path}`).toBeDefined();
      expect(c.authorization).toBe(`token ${TOKEN}`);
      if (c.body !== undefined) expect(registerOptions(JSON.parse(c.body)), JSON.stringify(registerOptions.errors)).toBe(true);
    }
    expect(calls.map((c) => `${c.method} ${c.path}`).slice(3, 6)).toEqual([
      "GET /api/v1/orgs/acme/actions/runners/jobs",
      "POST /api/v1/orgs/acme/actions/runners",
      "DELETE /api/v1/orgs/acme/actions/runners/12",
    ]);
    expect(JSON.parse(calls[1]!.body!)).toEqual({ name: "gdr-forgejo-41-1", ephemeral: true });
    // The validator itself refuses a field Forgejo does not know.
    expect(registerOptions({ name: "x", labels: ["a"] })).toBe(false);
  });

  it("an empty queue is null in Forgejo 15: no jobs; a job list that is not Forgejo's is an error naming the field", async () => {
    let body: unknown = null;
    const { client } = fakeForgejo(() => Response.json(body));
    expect(await client.jobs({ kind: "admin" })).toEqual([]);
    body = [];
    expect(await client.jobs({ kind: "admin" })).toEqual([]);
    // A job created before the upgrade to 15 has no handle: "".
    body = [{ ...job, handle: "" }];
    expect((await client.jobs({ kind: "admin" }))[0]!.handle).toBe("");
    body = [{ ...job, id: "41" }];
    await expect(client.jobs({ kind: "admin" })).rejects.toThrow(/not what Forgejo 15 sends: 0\.id /);
    body = { jobs: [] };
    await expect(client.jobs({ kind: "admin" })).rejects.toBeInstanceOf(ForgejoError);
  });

  it("refusals carry Forgejo's status and say why, never the token; a runner Forgejo no longer has is deleted already", async () => {
    let status = 401;
    const { client } = fakeForgejo(() => (status === 201 ? Response.json({ id: 1 }, { status }) : Response.json({ message: "x" }, { status })));
    const refused = await client.registerRunner({ kind: "admin" }, "r").catch((e: ForgejoError) => e);
    expect(refused).toBeInstanceOf(ForgejoError);
    expect((refused as ForgejoError).status).toBe(401);
    expect((refused as ForgejoError).message).toContain("GITEA_API_TOKEN is not accepted");
    expect((refused as ForgejoError).message).not.toContain(TOKEN);
    status = 422; // a failed binding: the name is required
    await expect(client.registerRunner({ kind: "admin" }, "")).rejects.toMatchObject({ status: 422 });
    status = 201; // 201 without uuid and token
    await expect(client.registerRunner({ kind: "admin" }, "r")).rejects.toThrow(/uuid .*token /s);
    status = 404;
    await expect(client.deleteRunner({ kind: "admin" }, 12)).resolves.toBeUndefined();
    status = 500;
    await expect(client.deleteRunner({ kind: "admin" }, 12)).rejects.toMatchObject({ status: 500 });
    await expect(client.jobs({ kind: "admin" })).rejects.toMatchObject({ status: 500 });
  });

  it("a scope name that is not a Forgejo name never reaches a path", async () => {
    const { calls, client } = fakeForgejo(() => Response.json(null));
    for (const scope of [
      { kind: "org", org: "../admin" },
      { kind: "repo", owner: "acme", repo: "a/b" },
      { kind: "org", org: "" },
    ] as ForgejoScope[]) {
      await expect(client.jobs(scope)).rejects.toThrow(/not a Forgejo name/);
    }
    expect(calls).toEqual([]);
    // A name like an Object.prototype member is a name like any other.
    await client.jobs({ kind: "org", org: "constructor" });
    expect(calls[0]!.path).toBe("/api/v1/orgs/constructor/actions/runners/jobs");
  });

  it("a Forgejo that does not answer within the timeout is an error that says so", async () => {
    const hang = ((_url: string, init: RequestInit) =>
      new Promise((_, reject) => init.signal?.addEventListener("abort", () => reject(init.signal!.reason as Error)))) as typeof fetch;
    const client = createForgejoClient({ url: "https://forgejo.example.org", apiToken: TOKEN, timeoutMs: 50, fetch: hang });
    await expect(client.jobs({ kind: "admin" })).rejects.toThrow("Forgejo did not answer GET /admin/actions/runners/jobs: TimeoutError");
  });
});
