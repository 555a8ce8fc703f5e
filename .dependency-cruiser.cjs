// The layers of src/, from the top down (CONTRIBUTING.md, "Where code goes"): a module may import
// from its own layer and the layers below it, never from one above. Type-only imports count: a
// store that names the HTTP layer's types is tied to it all the same. Imports that broke these
// rules when they were written down are listed in .dependency-cruiser-known-violations.json and
// are being narrowed away; test/node/layers.test.ts fails on any other.
const LAYERS = [
  ["entry", "^src/index\\.ts$"],
  ["wiring", "^src/app/"],
  ["faces", "^src/(http|gateway)/"],
  ["policy", "^src/(reconcile|pools|quotas|observe)/"],
  ["adapters", "^src/(forge|backends)/"],
  ["domain", "^src/domain/"],
  ["state", "^src/state/"],
  ["nats", "^src/nats/"],
  ["model", "^src/model/"],
];

const above = (i) => LAYERS.slice(0, i).map(([, path]) => path);

module.exports = {
  forbidden: [
    ...LAYERS.slice(1).map(([name, path], i) => ({
      name: `${name}-imports-up`,
      severity: "error",
      comment: `${name} (${path}) may import only from its own layer and those below it`,
      from: { path },
      to: { path: above(i + 1) },
    })),
    {
      name: "policy-reaches-no-forge",
      severity: "error",
      comment: "policy, state and the backends know a forge through the Forge contract (forge/types.ts) only",
      from: { path: "^src/(reconcile|pools|quotas|observe|state|backends)/" },
      to: { path: "^src/forge/(gitea|forgejo)/" },
    },
    {
      name: "root-holds-the-entry-only",
      severity: "error",
      comment: "src/ holds the entry only: every other module belongs to a layer's folder",
      from: { path: "^src/[^/]+\\.ts$", pathNot: "^src/index\\.ts$" },
      to: {},
    },
    {
      name: "no-cycles",
      severity: "error",
      from: { path: "^src/" },
      to: { circular: true },
    },
  ],
  options: {
    includeOnly: "^src/",
    tsPreCompilationDeps: true,
    enhancedResolveOptions: { extensions: [".ts", ".js", ".json"] },
  },
};
