import { describe, expect, it } from "vitest";
import { completeAssignment, decodeAssignment, encodeAssignment, fingerprint, type Assignment } from "../../src/model/assignment.ts";

const TD = "example.org";
const valid: Assignment = {
  version: 1,
  id: "gitea-1187-1",
  backend: "pod",
  workload: "spiffe://example.org/runner/pod/gitea-1187-1",
  labels: ["ubuntu-latest"],
  job: { id: 1187, runId: 311, attempt: 1, repository: "acme/widgets", name: "build" },
  createdAt: "2026-11-29T14:03:11Z",
};
const bytes = (v: unknown) => new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v));
const fieldsOf = (v: unknown) => {
  const d = decodeAssignment(bytes(v), TD);
  return d.ok ? [] : d.issues.map((i) => i.field);
};

describe("assignment wire format v1", () => {
  it("accepts a valid assignment and round-trips it canonically", () => {
    const d = decodeAssignment(encodeAssignment(valid), TD);
    expect(d).toEqual({ ok: true, assignment: valid });
    const { job: _job, ...minimal } = valid;
    expect(decodeAssignment(bytes(minimal), TD).ok).toBe(true);
    expect(decodeAssignment(bytes({ ...valid, createdAt: "2026-11-29T14:03:11.123+02:00" }), TD).ok).toBe(true);
  });

  it.each([
    ["wrong version", { ...valid, version: 2 }, "version"],
    ["unknown field", { ...valid, secret: "x" }, "secret"],
    ["unknown job field", { ...valid, job: { ...valid.job, token: "x" } }, "job"],
    ["bad id start", { ...valid, id: ".hidden" }, "id"],
    ["id too long", { ...valid, id: "a".repeat(129) }, "id"],
    ["id with slash", { ...valid, id: "a/b" }, "id"],
    ["backend that is no backend name", { ...valid, backend: "Lambda" }, "backend"],
    ["backend with a dot", { ...valid, backend: "gpu.large" }, "backend"],
    ["backend named like a prototype key", { ...valid, backend: "__proto__" }, "backend"],
    ["workload not SPIFFE", { ...valid, workload: "https://example.org/x" }, "workload"],
    ["workload of another trust domain", { ...valid, workload: "spiffe://evil.org/runner/pod/x" }, "workload"],
    ["no labels", { ...valid, labels: [] }, "labels"],
    ["33 labels", { ...valid, labels: Array.from({ length: 33 }, (_, i) => `l${i}`) }, "labels"],
    ["createdAt not RFC 3339", { ...valid, createdAt: "yesterday" }, "createdAt"],
    ["missing createdAt", { ...valid, createdAt: undefined }, "createdAt"],
  ])("rejects %s, naming the field", (_name, value, field) => {
    expect(fieldsOf(value).join(" ")).toContain(field);
  });

  it("names every unknown field, even one with an empty name (found by fast-check)", () => {
    const d = decodeAssignment(bytes({ ...valid, "": "", extra: 1, job: { ...valid.job, more: 2 } }), TD);
    expect(d.ok ? [] : d.issues).toEqual(
      expect.arrayContaining([
        { field: '""', message: "unknown field" },
        { field: "extra", message: "unknown field" },
        { field: "job.more", message: "unknown field" },
      ]),
    );
  });

  it("rejects non-JSON, non-UTF-8 and oversized bodies", () => {
    expect(decodeAssignment(bytes("{nope"), TD).ok).toBe(false);
    expect(decodeAssignment(new Uint8Array([0x7b, 0xff, 0x7d]), TD).ok).toBe(false);
    expect(decodeAssignment(bytes({ ...valid, job: { ...valid.job, name: "x".repeat(17_000) } }), TD)).toMatchObject({
      ok: false,
      issues: [{ field: "(body)" }],
    });
  });

  it("fingerprint ignores createdAt only", () => {
    expect(fingerprint({ ...valid, createdAt: "2030-01-01T00:00:00Z" })).toBe(fingerprint(valid));
    expect(fingerprint({ ...valid, labels: ["other"] })).not.toBe(fingerprint(valid));
    expect(fingerprint({ ...valid, backend: "vm", workload: "spiffe://example.org/runner/vm/gitea-1187-1" })).not.toBe(fingerprint(valid));
  });

  it("fills in workload and createdAt of a request", () => {
    const now = new Date("2026-11-30T10:00:00Z");
    const { workload: _w, createdAt: _c, ...request } = valid;
    expect(completeAssignment(request, TD, now)).toEqual({
      ok: true,
      assignment: { ...valid, workload: "spiffe://example.org/runner/pod/gitea-1187-1", createdAt: "2026-11-30T10:00:00.000Z" },
    });
  });
});
