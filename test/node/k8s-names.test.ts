// Kubernetes object names and label values for every id the assignment id rule admits: valid by
// Kubernetes' own rules (IsDNS1123Label for names, IsValidLabelValue for labels), and distinct for
// distinct ids, so that two assignments never share a Pod or a Secret.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { assignmentIdSchema } from "../../src/model/assignment.ts";
import { DNS_1123_LABEL, LABEL_VALUE, objectNames } from "../../src/backends/kubernetes/names.ts";

const SEED = Number(globalThis.process?.env?.FC_SEED ?? 20261201);
// The id rule of src/model/assignment.ts, as a generator; checked against the schema below.
const anyId = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/);
const prefixes = fc.constantFrom("gdr", "a", "runners-", "x".repeat(32), "gdr-prod-eu");

const validName = (n: string) => n.length <= 63 && DNS_1123_LABEL.test(n);
const validLabel = (v: string) => v.length <= 63 && LABEL_VALUE.test(v);

describe("kubernetes object names", () => {
  it("are valid names and label values for every id the id rule admits", async () => {
    await fc.assert(
      fc.asyncProperty(prefixes, anyId, async (prefix, id) => {
        expect(assignmentIdSchema.safeParse(id).success).toBe(true);
        const { name, label } = await objectNames(prefix, id);
        expect(validName(name), name).toBe(true);
        expect(validLabel(label), label).toBe(true);
      }),
      { numRuns: 2_000, seed: SEED },
    );
  });

  it("are injective: distinct ids never share a name or a label", async () => {
    await fc.assert(
      fc.asyncProperty(prefixes, fc.uniqueArray(anyId, { minLength: 2, maxLength: 40 }), async (prefix, ids) => {
        const all = await Promise.all(ids.map((id) => objectNames(prefix, id)));
        expect(new Set(all.map((n) => n.name)).size).toBe(ids.length);
        expect(new Set(all.map((n) => n.label)).size).toBe(ids.length);
      }),
      { numRuns: 500, seed: SEED },
    );
  });

  it("handle the near misses: trailing '-', '.', '_', case, '--', and an id shaped like another's hashed name", async () => {
    for (const id of ["job-", "build.", "x_", "A", "a--b", "Gitea-1187-1", "a".repeat(128)]) {
      const { name, label } = await objectNames("gdr", id);
      expect(validName(name), `${id} → ${name}`).toBe(true);
      expect(validLabel(label), `${id} → ${label}`).toBe(true);
    }
    // The collision that was: "A" hashed to gdr-a-<8 hex>, the very name of the id "a-<8 hex>".
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode("A")));
    const oldHash = Array.from(digest.slice(0, 4), (b) => b.toString(16).padStart(2, "0")).join("");
    const upper = await objectNames("gdr", "A");
    const lookalike = await objectNames("gdr", `a-${oldHash}`);
    expect(lookalike.name).toBe(`gdr-a-${oldHash}`);
    expect(upper.name).not.toBe(lookalike.name);
    // Any tail with "--" is a hashed one; a plain id with "--" is hashed too, not taken as is.
    const doubled = await objectNames("gdr", "a--0123456789abcdef");
    expect(doubled.name).not.toBe("gdr-a--0123456789abcdef");
    expect((await objectNames("gdr", "gitea-1187-1")).name).toBe("gdr-gitea-1187-1");
  });

  // Pinned, so that objects an earlier version made keep their names (a renamed Pod would be an
  // orphan): "--" and the first 16 hex characters of SHA-256 of the exact id (sha256sum).
  it("hash exactly as before: <readable>--<16 hex of SHA-256(id)>", async () => {
    expect(await objectNames("gdr", "Gitea-1187-1")).toEqual({ name: "gdr-gitea-1187-1--1c90a5c85a0cb0cc", label: "gitea-1187-1--1c90a5c85a0cb0cc" });
    expect(await objectNames("gdr", "a--b")).toEqual({ name: "gdr-a-b--90827a2e56361a8f", label: "a-b--90827a2e56361a8f" });
    expect(await objectNames("runners", "build.x")).toEqual({ name: "runners-build-x--0cf5ab8abb4fa10d", label: "build-x--0cf5ab8abb4fa10d" });
    // The plain form is the id itself.
    expect(await objectNames("gdr", "gitea-1187-1")).toEqual({ name: "gdr-gitea-1187-1", label: "gitea-1187-1" });
  });
});
