// The assignment's state machine (model/states.ts TRANSITIONS): the records store refuses any
// other change of state, and docs/architecture.md draws exactly this table.
import { readFileSync } from "node:fs";
import { describe, expect, inject, it } from "vitest";
import { ASSIGNMENT_STATES, canTransition, TRANSITIONS } from "../../src/model/states.ts";
import { IllegalTransition } from "../../src/model/errors.ts";
import { written } from "../harness/memory.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { loadConfig } from "../../src/app/config.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

/** The edges of the table: `from --> to: name`, `[*]` where a record is created so. */
const edges = () => TRANSITIONS.flatMap((t) => (t.from.length ? t.from.map((f) => `${f} --> ${t.to}: ${t.name}`) : [`[*] --> ${t.to}: ${t.name}`])).sort();

describe("the assignment's states", () => {
  it("docs/architecture.md draws exactly the transitions of the table", () => {
    const doc = readFileSync("docs/architecture.md", "utf8");
    const diagram = /```mermaid\nstateDiagram-v2\n([\s\S]*?)```/.exec(doc)?.[1];
    expect(diagram, "a mermaid stateDiagram-v2 in docs/architecture.md").toBeDefined();
    const drawn = diagram!
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l.includes("-->"))
      .sort();
    expect(drawn).toEqual(edges());
  });

  it("every state can be reached, and only completed has no way out", () => {
    for (const s of ASSIGNMENT_STATES)
      expect(
        TRANSITIONS.some((t) => t.to === s),
        s,
      ).toBe(true);
    const exits = ASSIGNMENT_STATES.filter((s) => ASSIGNMENT_STATES.some((to) => to !== s && canTransition(s, to)));
    expect(ASSIGNMENT_STATES.filter((s) => !exits.includes(s))).toEqual(["completed"]);
  });

  it("allows the moves the code makes and refuses the ones no rule names: a claim is never undone, an end is undone only to wait or start over", () => {
    expect(canTransition("backend_ready", "claimed")).toBe(true);
    expect(canTransition("claimed", "completed")).toBe(true);
    expect(canTransition("terminated", "capacity_wait")).toBe(true);
    expect(canTransition("capacity_wait", "capacity_wait")).toBe(true);
    for (const [from, to] of [
      ["claimed", "backend_pending"],
      ["claimed", "backend_ready"],
      ["claimed", "capacity_wait"],
      ["completed", "terminated"],
      ["completed", "received"],
      ["terminated", "backend_pending"],
      ["terminated", "claimed"],
      ["completed", "claimed"],
    ] as const)
      expect(canTransition(from, to), `${from} → ${to}`).toBe(false);
  });

  it("the records store refuses a change of state the table does not name, and writes nothing; near miss: a named one is written", async () => {
    const env = testEnv(nats, backendUrl);
    await provisionEnv(env);
    const d = createDispatcher({ config: loadConfig(env), sink: silent });
    await d.withState(async ({ records }) => {
      await records.offer(assignment("sm-1"));
      await records.update("sm-1", (r) => written({ ...r, state: "backend_pending" }));
      await records.update("sm-1", (r) => written({ ...r, state: "claimed" }));
      await expect(records.update("sm-1", (r) => written({ ...r, state: "backend_pending" }))).rejects.toThrow(IllegalTransition);
      expect((await records.get("sm-1"))?.state).toBe("claimed");
      expect((await records.update("sm-1", (r) => written({ ...r, state: "completed" })))?.state).toBe("completed");
    });
  });
});
