// No import cycles in src/, type-only imports included: each module can be understood (and
// loaded) after the ones it imports. madge reads the imports with TypeScript's own parser.
import madge from "madge";
import { expect, it } from "vitest";

it("src/ has no import cycles", async () => {
  const graph = await madge("src", { fileExtensions: ["ts"], detectiveOptions: { ts: { skipTypeImports: false } } });
  expect(Object.keys(graph.obj()).length).toBeGreaterThan(40);
  expect(graph.circular()).toEqual([]);
});
