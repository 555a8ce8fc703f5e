// The layers of src/, from the top down (CONTRIBUTING.md, "Where code goes"): a module may import
// from its own layer and the layers below it, never from one above. Type-only imports count: a
// store that names the HTTP layer's types is tied to it all the same. Imports that broke these
// rules when they were written down were listed in .dependency-cruiser-known-violations.json
// (41 then; none left now); test/node/layers.test.ts fails on any import not listed there.
const LAYERS = [
  ["entry", "^src/index\\.ts$"],
  // What calls in: the HTTP API and the gateway's Durable Object.
  ["faces", "^src/(http|gateway)/"],
  // Builds the dispatcher from the configuration and owns an invocation's lifetime (and the
  // Forgejo poller's Durable Object, which builds one).
  ["wiring", "^src/app/"],
  // Where jobs come from: a forge's webhooks, poller, sweep and runner registration. They drive
  // policy; policy knows a forge only through the Forge contract (domain/forge.ts).
  ["forges", "^src/forge/"],
  ["policy", "^src/(reconcile|pools|quotas|observe)/"],
  // Where runners run: implementations of the RunnerBackend contract (domain/backend.ts).
  ["backends", "^src/backends/"],
  ["domain", "^src/domain/"],
  // The Actions cache the Worker serves from R2: its index in NATS KV, its capabilities and MACs.
  // A leaf feature: the faces serve it and the wiring mints its URLs; it knows no forge or driver.
  ["cache", "^src/cache/"],
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
      comment: "policy, the backends, the domain and the stores know a forge through the Forge contract (domain/forge.ts) only",
      from: { path: "^src/(reconcile|pools|quotas|observe|backends|domain|cache|state)/" },
      to: { path: "^src/forge/" },
    },
    {
      name: "forges-stay-apart",
      severity: "error",
      comment: "a forge's folder imports no other forge's: a third forge touches only its own folder and the choice of forge (app/select-forge.ts)",
      from: { path: "^src/forge/([^/]+)/" },
      to: { path: "^src/forge/[^/]+/", pathNot: "^src/forge/$1/" },
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
