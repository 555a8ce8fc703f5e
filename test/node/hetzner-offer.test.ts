// What a Hetzner project may create with, read on the tick and held against every pool's placement:
// the pure check (offer.ts offerMismatches) by its near misses, when the tick reads it again
// (offerDue), and the reading itself on the strict fake (every page, kept in the figures, refused
// calls keep the last one).
import { afterEach, describe, expect, it } from "vitest";
import { offerMismatches, offerProblems, readOffer, type HetznerOffer } from "../../src/backends/hetzner/offer.ts";
import type { HetznerApi } from "../../src/backends/hetzner/client.ts";
import { placementsOf, type FieldLayers } from "../../src/backends/refused-field.ts";
import { OFFER_MAX_AGE_MS, OFFER_RECHECK_MS, offerDue, type Offer } from "../../src/state/driver-figures.ts";
import { hetznerScene, type HetznerScene } from "../harness/hetzner.ts";

const offer: HetznerOffer = {
  serverTypes: { cx22: { arch: "x86", in: ["fsn1", "nbg1"] }, cpx31: { arch: "x86", in: ["fsn1", "ash"] }, cax11: { arch: "arm", in: ["fsn1"] } },
  locations: ["fsn1", "nbg1", "ash"],
  images: { "ubuntu-24.04": ["x86", "arm"], "101": ["x86"], "202": ["arm"] },
};
const base = { image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" };
const layers = (template: Record<string, unknown>, pool?: FieldLayers["pool"], candidate?: FieldLayers["candidate"]): FieldLayers => ({
  templateVariable: "VM_TEMPLATE",
  template,
  ...(pool ? { pool } : {}),
  ...(candidate ? { candidate } : {}),
});
const vars = (l: FieldLayers) => offerMismatches(offer, l).map((m) => m.variable);

describe("offerMismatches", () => {
  it("a placement of offered names has none; a field no layer sets is Hetzner's to choose", () => {
    expect(offerMismatches(offer, layers(base))).toEqual([]);
    expect(offerMismatches(offer, layers({ server_type: "cx22" }))).toEqual([]);
    expect(offerMismatches(offer, layers({ ...base, image: 101 }))).toEqual([]);
  });

  it("a server type one character off is named where it was written: the candidate, the pool's template, VM_TEMPLATE", () => {
    const pool = { name: "big", template: { server_type: "cx2" } };
    expect(offerMismatches(offer, layers(base, pool, { index: 1, value: { server_type: "cx222", location: "fsn1" } }))).toEqual([
      {
        variable: 'RUNNER_POOLS pool "big" candidates[1].server_type',
        message: 'RUNNER_POOLS pool "big" candidates[1].server_type = "cx222" is no server type the project can create (cax11, cpx31, cx22)',
      },
    ]);
    expect(vars(layers(base, pool))).toEqual(['RUNNER_POOLS pool "big" template.server_type']);
    expect(vars(layers({ ...base, server_type: "CX22" }))).toEqual(["VM_TEMPLATE.server_type"]);
  });

  it("names inherited from Object are not offered: constructor, toString, __proto__", () => {
    for (const name of ["constructor", "toString", "__proto__"]) {
      expect(vars(layers({ ...base, server_type: name }))).toEqual(["VM_TEMPLATE.server_type"]);
      expect(vars(layers({ ...base, image: name }))).toEqual(["VM_TEMPLATE.image"]);
    }
  });

  it("an unknown location, and a type not sold in its location, name both fields", () => {
    expect(vars(layers({ ...base, location: "fsn2" }))).toEqual(["VM_TEMPLATE.location"]);
    const [m] = offerMismatches(offer, layers({ ...base, location: "ash" }));
    expect(m).toEqual({
      variable: "VM_TEMPLATE.server_type or VM_TEMPLATE.location",
      message: 'VM_TEMPLATE.server_type = "cx22" is not sold in location "ash" (VM_TEMPLATE.location); it is in fsn1, nbg1',
    });
    expect(offerMismatches(offer, layers({ ...base, server_type: "cpx31", location: "ash" }))).toEqual([]);
  });

  it("an unknown image, and one made for the other architecture (a snapshot of an Arm server on an x86 type)", () => {
    expect(vars(layers({ ...base, image: "ubuntu-24.4" }))).toEqual(["VM_TEMPLATE.image"]);
    expect(vars(layers({ ...base, image: 203 }))).toEqual(["VM_TEMPLATE.image"]);
    expect(offerMismatches(offer, layers({ ...base, image: 202 }))[0]?.message).toBe('VM_TEMPLATE.image = 202 is made for arm, and server type "cx22" is x86');
    expect(offerMismatches(offer, layers({ ...base, image: 202, server_type: "cax11" }))).toEqual([]);
    expect(offerMismatches(offer, layers({ ...base, image: "ubuntu-24.04", server_type: "cax11" }))).toEqual([]);
  });

  it("every placement of a backend: its template alone, each pool, each candidate; a problem shared by several is said once", () => {
    const pools = [
      {
        name: "a",
        candidates: [
          { server_type: "cx22", location: "fsn1" },
          { server_type: "cx99", location: "fsn1" },
        ],
      },
      { name: "b", template: { image: "ubuntu-9" } },
      { name: "c", template: { image: "ubuntu-9" } },
    ];
    const found = offerProblems(offer, placementsOf("VM_TEMPLATE", { ...base, location: "mars" }, pools));
    expect(found.map((m) => m.variable)).toEqual([
      "VM_TEMPLATE.location",
      'RUNNER_POOLS pool "a" candidates[1].server_type',
      'RUNNER_POOLS pool "b" template.image',
      'RUNNER_POOLS pool "c" template.image',
    ]);
  });
});

describe("offerDue", () => {
  const at = 1_000_000_000;
  const kept: Offer = { at, of: "https://api.hetzner.cloud/v1", data: offer };
  it("none kept, or one of another API: read now", () => {
    expect(offerDue(undefined, kept.of, at, false)).toBe(true);
    expect(offerDue(kept, "https://api.hetzner.cloud/v2", at + 1, false)).toBe(true);
  });
  it("hourly; every five minutes while a placement is not in it; a time ahead of the clock is read again", () => {
    expect(offerDue(kept, kept.of, at + OFFER_MAX_AGE_MS - 1, false)).toBe(false);
    expect(offerDue(kept, kept.of, at + OFFER_MAX_AGE_MS, false)).toBe(true);
    expect(offerDue(kept, kept.of, at + OFFER_RECHECK_MS - 1, true)).toBe(false);
    expect(offerDue(kept, kept.of, at + OFFER_RECHECK_MS, true)).toBe(true);
    expect(offerDue(kept, kept.of, at + OFFER_RECHECK_MS, false)).toBe(false);
    expect(offerDue(kept, kept.of, at - 1, false)).toBe(true);
  });
});

describe("readOffer", () => {
  it("a location past a type's unavailable_after is not where it is sold; one announced only still is", async () => {
    const now = Date.parse("2026-12-07T00:00:00Z");
    const lists: Record<string, unknown[]> = {
      server_types: [
        {
          name: "cx22",
          architecture: "x86",
          locations: [
            { name: "fsn1", deprecation: null },
            { name: "nbg1", deprecation: { announced: "2026-01-01T00:00:00Z", unavailable_after: "2026-12-06T23:59:59Z" } },
            { name: "hel1", deprecation: { announced: "2026-01-01T00:00:00Z", unavailable_after: "2027-01-01T00:00:00Z" } },
          ],
        },
      ],
      locations: [{ name: "fsn1" }],
      images: [
        { id: 7, name: "debian-13", architecture: "x86" },
        { id: 8, name: "debian-13", architecture: "arm" },
        { id: 9, name: null, architecture: "arm" },
      ],
    };
    const api = { list: async (r: string) => lists[r]! } as unknown as HetznerApi;
    expect(await readOffer(api, AbortSignal.timeout(1000), now)).toEqual({
      serverTypes: { cx22: { arch: "x86", in: ["fsn1", "hel1"] } },
      locations: ["fsn1"],
      images: { "7": ["x86"], "debian-13": ["x86", "arm"], "8": ["arm"], "9": ["arm"] },
    });
  });
});

describe("the tick reads the offer on the fake Hetzner API", () => {
  const scenes: HetznerScene[] = [];
  afterEach(async () => {
    for (const s of scenes.splice(0)) await s.close();
  });
  const lists = async (s: HetznerScene) =>
    ((await s.state()).requests as { method: string; path: string; query: string }[]).filter((r) =>
      ["/server_types", "/locations", "/images"].includes(r.path),
    );

  it("every page of every list, kept in the figures; not again within the hour, again after it", async () => {
    const s = await hetznerScene();
    scenes.push(s);
    // 61 snapshots and 8 system images: the image list has two pages of 50.
    for (let id = 5000; id < 5061; id++) await s.ctl("image", { image: id });
    await s.sweep();
    expect((await lists(s)).map((r) => `${r.path}${r.query}`)).toEqual([
      "/server_types?per_page=50&page=1",
      "/locations?per_page=50&page=1",
      "/images?status=available&include_deprecated=true&per_page=50&page=1",
      "/images?status=available&include_deprecated=true&per_page=50&page=2",
    ]);
    const kept = (await s.stores.figures.get("pod"))?.offer;
    expect(kept).toMatchObject({ at: s.clock.t, of: s.base });
    const data = kept!.data as HetznerOffer;
    expect(data.serverTypes.cax11).toEqual({ arch: "arm", in: ["fsn1", "nbg1", "hel1"] });
    expect(data.images["5060"]).toEqual(["x86"]);
    expect(data.images["ubuntu-24.04"]).toEqual(["x86", "arm"]);
    s.clock.t += OFFER_MAX_AGE_MS - 1000;
    await s.sweep();
    expect(await lists(s)).toHaveLength(4);
    s.clock.t += 1000;
    await s.sweep();
    expect(await lists(s)).toHaveLength(8);
  });

  it("a list the API refuses keeps the offer read before, and the sweep's own work stands; the next tick reads it", async () => {
    const s = await hetznerScene();
    scenes.push(s);
    await s.sweep();
    const first = (await s.stores.figures.get("pod"))?.offer;
    s.clock.t += OFFER_MAX_AGE_MS;
    // The sweep's list is call 1; the first list of the offer fails.
    await s.ctl("mode", { failCalls: [2] });
    await s.sweep();
    expect((await s.stores.figures.get("pod"))?.offer).toEqual(first);
    await s.sweep();
    expect((await s.stores.figures.get("pod"))?.offer?.at).toBe(s.clock.t);
  });

  it("a snapshot made after a pool named it is found within five minutes, not the hour", async () => {
    const s = await hetznerScene({ VM_TEMPLATE: JSON.stringify({ image: "777", server_type: "cx22", location: "fsn1" }) });
    scenes.push(s);
    await s.sweep();
    expect(((await s.stores.figures.get("pod"))?.offer?.data as HetznerOffer).images["777"]).toBeUndefined();
    await s.ctl("image", { image: 777 });
    s.clock.t += OFFER_RECHECK_MS;
    await s.sweep();
    expect(((await s.stores.figures.get("pod"))?.offer?.data as HetznerOffer).images["777"]).toEqual(["x86"]);
  });
});
