// The OpenAPI document: valid OpenAPI 3.1 by a maintained validator, one entry for every route the
// app has (and none it lacks), the three auth schemes, and the errors each route can give. The
// workerd suites check every response they get against it (test/harness/openapi-check.ts).
import { Validator } from "@seriousme/openapi-schema-validator";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app.ts";
import { openApiDocument } from "../../src/http/openapi.ts";

type Doc = {
  openapi: string;
  paths: Record<string, Record<string, { security?: Record<string, string[]>[]; responses: Record<string, unknown> }>>;
  components: { securitySchemes: Record<string, unknown> };
};
const doc = openApiDocument() as unknown as Doc;

describe("OpenAPI document", () => {
  it("is valid OpenAPI 3.1", async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");
    // The validator's near miss: a response keyed by something that is not a status.
    const broken = structuredClone(doc);
    broken.paths["/metrics"]!.get!.responses = { ok: { description: "x" } };
    expect((await new Validator().validate(broken as never)).valid).toBe(false);
  });

  it("documents exactly the routes the app serves", () => {
    const app = createApp({
      dispatcher: () => {
        throw new Error("not called");
      },
    });
    const served = new Set(app.routes.filter((r) => r.method !== "ALL").map((r) => `${r.method.toLowerCase()} ${r.path.replace(/:(\w+)/g, "{$1}")}`));
    const documented = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`)));
    expect([...documented].sort()).toEqual([...served].sort());
  });

  it("names the auth schemes and lists each route's errors", () => {
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual([
      "bootstrapToken",
      "claimToken",
      "dispatchToken",
      "forgejoSignature",
      "giteaSignature",
      "metricsToken",
      "statusPassword",
    ]);
    const op = (path: string, method = "post") => doc.paths[path]![method]!;
    expect(op("/v1/assignments/{id}/claim").security).toEqual([{ claimToken: [] }]);
    expect(op("/v1/assignments/{id}/bootstrap").security).toEqual([{ bootstrapToken: [] }]);
    expect(op("/v1/gitea/webhook").security).toEqual([{ giteaSignature: [] }]);
    expect(op("/v1/forgejo/webhook").security).toEqual([{ forgejoSignature: [] }]);
    expect(Object.keys(op("/v1/assignments").responses).sort()).toEqual(["202", "400", "401", "409", "413", "415", "500", "503"]);
    expect(Object.keys(op("/v1/assignments/{id}/claim").responses).sort()).toEqual(["200", "401", "403", "404", "409", "500", "503"]);
  });
});
