// A turn's slot handed to its delivery (state/turn-slots.ts, admission.placeMany's handOn): the
// delivery takes no slot and reserves its registration in one publish, and that publish, made on
// "no word yet", is what keeps one registration per job whoever else asks.
import { describe, expect, inject, it } from "vitest";
import { createAdmission, type Admission, type Placement } from "../../src/state/admission.ts";
import { createTurnSlots, HANDED_MS } from "../../src/state/turn-slots.ts";
import { withNats, type NatsHandle } from "../../src/nats/connection.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";
import type { Config } from "../../src/app/config.ts";

const nats = inject("natsWsUrl");
const backend = inject("backendUrl");
const pod = [{ backend: "pod" as const }];

describe("turn slots", () => {
  it("hands a slot once, within HANDED_MS; near misses: taken twice, taken late, never handed", () => {
    const slots = createTurnSlots();
    slots.hand("a", { seq: 7, place: pod[0]! }, 1_000);
    slots.hand("b", { seq: 8, place: pod[0]! }, 1_000);
    expect(slots.take("a", 1_000 + HANDED_MS)).toEqual({ seq: 7, place: pod[0] });
    expect(slots.take("a", 1_001)).toBeUndefined();
    expect(slots.take("b", 1_001 + HANDED_MS)).toBeUndefined();
    expect(slots.take("constructor", 1_001)).toBeUndefined();
  });

  it("keeps at most its limit, the oldest going first", () => {
    const slots = createTurnSlots(2);
    for (const [i, id] of ["a", "b", "c"].entries()) slots.hand(id, { seq: i, place: pod[0]! }, 0);
    expect(["a", "b", "c"].map((id) => slots.take(id, 0)?.seq)).toEqual([undefined, 1, 2]);
  });
});

/** Admission on `h`, with the isolate's turn slots and clock given; the subjects of the requests it sends, in `sent`. */
function admissionOn(h: NatsHandle, config: Config, turnSlots = createTurnSlots<Placement>(), clock = { now: Date.now() }) {
  const sent: string[] = [];
  const request = h.nc.request.bind(h.nc);
  h.nc.request = (subject, ...rest) => (sent.push(subject), request(subject, ...rest));
  const admission = createAdmission(h, {
    names: config,
    capacity: config.capacity,
    leaseTtlMs: 60_000,
    registrationLeaseMs: 60_000,
    turnSlots,
    now: () => clock.now,
  });
  return { admission, sent, clock };
}

/** A delivery of `id` asking to register: the first of its turn's message (`turn`), or another. */
const reserve = async (admission: Admission, id: string, turn = true) => {
  const { admitted, reserved } = await admission.placeMany([{ id, places: pod }], new Set([id]), { turns: new Set(turn ? [id] : []) });
  return { admitted: admitted.has(id), reserved: reserved.has(id) };
};

describe("a turn's slot handed to its delivery, against nats-server", () => {
  it("admits the delivery without a slot request and reserves in one publish; a second delivery gets no reservation", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await withNats(config, async (h) => {
      const { admission, sent } = admissionOn(h, config);
      expect((await admission.placeMany([{ id: "t", places: pod }], undefined, { handOn: true })).admitted.has("t")).toBe(true);
      sent.length = 0;
      expect(await reserve(admission, "t")).toEqual({ admitted: true, reserved: true });
      expect(sent.map((s) => s.replace(config.subjectBase, "S"))).toEqual(["S.registering.pod.t"]);
      // The hand-on is taken: the next delivery goes the usual way, and the word it finds is live.
      expect(await reserve(admission, "t")).toEqual({ admitted: true, reserved: false });
      expect(await admission.holders("pod")).toEqual(["t"]);
      expect(await admission.registering("pod")).toEqual(["t"]);
    });
  });

  it("one reservation between a handed delivery and another isolate's delivery that reserved first", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await withNats(config, async (h) => {
      const here = admissionOn(h, config);
      await here.admission.placeMany([{ id: "t", places: pod }], undefined, { handOn: true });
      await withNats(config, async (h2) => {
        // Another isolate: no hand-on there, so it asks the slot (held) and reserves against the streams.
        const elsewhere = admissionOn(h2, config);
        expect(await reserve(elsewhere.admission, "t")).toEqual({ admitted: true, reserved: true });
      });
      expect(await reserve(here.admission, "t")).toEqual({ admitted: true, reserved: false });
    });
  });

  it("a word about an older slot of the id does not stop the handed delivery's reservation", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await withNats(config, async (h) => {
      const { admission } = admissionOn(h, config);
      // An earlier slot of "t" reserved, ended its reservation ("open"), and was released.
      await admission.placeMany([{ id: "t", places: pod }], new Set(["t"]));
      await admission.endRegistrations("pod", ["t"]);
      await admission.release("pod", "t");
      await admission.placeMany([{ id: "t", places: pod }], undefined, { handOn: true });
      expect(await reserve(admission, "t")).toEqual({ admitted: true, reserved: true });
      expect(await admission.registering("pod")).toEqual(["t"]);
    });
  });

  it("is not handed once HANDED_MS passed: a slot released meanwhile is asked for again, and a full backend refuses it", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 1 }));
    await withNats(config, async (h) => {
      const { admission, clock } = admissionOn(h, config);
      await admission.placeMany([{ id: "t", places: pod }], undefined, { handOn: true });
      await admission.release("pod", "t");
      expect(await admission.acquire("pod", "other")).toBe(true);
      clock.now += HANDED_MS + 1;
      expect(await reserve(admission, "t")).toEqual({ admitted: false, reserved: false });
      expect(await admission.holders("pod")).toEqual(["other"]);
    });
  });

  it("hands the slot only to the turn's message's first delivery: a redelivery here asks for its slot as usual", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await withNats(config, async (h) => {
      const { admission, sent } = admissionOn(h, config);
      await admission.placeMany([{ id: "t", places: pod }], undefined, { handOn: true });
      sent.length = 0;
      expect(await reserve(admission, "t", false)).toEqual({ admitted: true, reserved: true });
      expect(sent.some((s) => s.includes(".slots.pod.t"))).toBe(true);
    });
  });

  it("hands only a slot its call took: a turn re-given to a job that held its slot hands nothing", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await withNats(config, async (h) => {
      const { admission, sent } = admissionOn(h, config);
      await admission.placeMany([{ id: "t", places: pod }]);
      await admission.placeMany([{ id: "t", places: pod }], undefined, { handOn: true });
      sent.length = 0;
      expect(await reserve(admission, "t")).toEqual({ admitted: true, reserved: true });
      expect(sent.some((s) => s.includes(".slots.pod.t"))).toBe(true);
    });
  });
});
