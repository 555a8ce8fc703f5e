// Each headline figure of `npm run bench` against the stored run (bench/results/latest.json as it
// was before this run): its change, and a mark on any figure more than 10 % worse, so that no
// regression lands without a word. A figure that either run lacks (a section not run, or failed)
// is left out.

/** Worse by more than this fraction is marked. */
export const WORSE_BY = 0.1;

const p50 = (x) => x?.p50Ms;
/** The figures compared: where each is in a run's results, and which way is better. */
export const FIGURES = [
  { name: "ingest, c=16 (req/s)", at: (x) => x.ingest?.rps, better: "higher" },
  { name: "ingest p99 at c=32 (ms)", at: (x) => x.ingest?.p99MsAt32, better: "lower" },
  { name: "reconcile, k=1000 (acked/s)", at: (x) => x.reconcile?.assignmentsPerSec, better: "higher" },
  { name: "NATS ops per webhook", at: (x) => x.req?.perWebhook, better: "lower" },
  { name: "NATS ops per reconciled assignment", at: (x) => x.req?.perReconciled, better: "lower" },
  { name: "time to runner, loopback, p50 (ms)", at: (x) => p50(x.ttr?.loopback), better: "lower" },
  { name: "time to runner, 50 ms RTT, p50 (ms)", at: (x) => p50(x.ttr?.rtt50), better: "lower" },
  { name: "time to runner, 16 in flight, p50 (ms)", at: (x) => p50(x.ttrload?.underLoad), better: "lower" },
  { name: "Worker CPU per job, 16 in flight (ms)", at: (x) => x.ttrload?.underLoad?.cpuMsPerJob?.["worker:workerd"], better: "lower" },
  { name: "admissions/s, 0 ms RTT", at: (x) => x.admission?.rtt0?.admissionsPerSec, better: "higher" },
  { name: "admissions/s, 50 ms RTT", at: (x) => x.admission?.rtt50?.admissionsPerSec, better: "higher" },
  { name: "time to runner, R3 cluster, p50 (ms)", at: (x) => p50(x.cluster?.timeToRunner), better: "lower" },
  { name: "R3 leader writes/s", at: (x) => x.cluster?.leader?.writesPerSec, better: "higher" },
  { name: "jobs/s of the ceiling, 4 isolates", at: (x) => x.isolates?.four?.ofCeiling, better: "higher" },
  { name: "soak heap growth per job (KB)", at: (x) => x.soak?.growthKBPerJob, better: "lower" },
  { name: "warm start-up, p50 (ms)", at: (x) => p50(x.pools?.warm), better: "lower" },
  { name: "runners made per job", at: (x) => x.pools?.long?.perJob, better: "lower" },
  { name: "fair share, a small app's wait, p50 (ms)", at: (x) => x.fairness?.fair?.appToInProgressP50Ms, better: "lower" },
  ...["fifo", "fair", "pools", "quotas"].flatMap((v) => [
    { name: `a job's life, ${v}, NATS ops`, at: (x) => x.cost?.[v]?.opsPerJob, better: "lower" },
    { name: `a job's life, ${v}, Worker CPU (ms)`, at: (x) => x.cost?.[v]?.workerCpuMsPerJob, better: "lower" },
  ]),
  { name: "Forgejo, queued → runner asked, p50 (ms)", at: (x) => p50(x.forgejo?.toRunnerAsked), better: "lower" },
  { name: "Forgejo, NATS ops per job", at: (x) => x.forgejo?.perJob?.natsOps, better: "lower" },
  { name: "webhook answer, 50 ms RTT, gateway on, p50 (ms)", at: (x) => p50(x.distance?.webhook?.rtt50?.on), better: "lower" },
  { name: "webhooks/s, 50 ms RTT, gateway on", at: (x) => x.distance?.throughput?.on?.rps, better: "higher" },
];

const number = (v) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);

/** Each figure both runs have: before, after, the change as a fraction of before, and whether it is more than WORSE_BY worse. */
export function compareRuns(stored, now, figures = FIGURES) {
  return figures.flatMap(({ name, at, better }) => {
    const before = number(at(stored ?? {}));
    const after = number(at(now ?? {}));
    if (before === undefined || after === undefined) return [];
    const change = before === 0 ? (after === 0 ? 0 : Math.sign(after) * Infinity) : (after - before) / Math.abs(before);
    const worse = better === "higher" ? change < -WORSE_BY : change > WORSE_BY;
    return [{ name, before, after, change, worse }];
  });
}

const shown = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

/** The comparison as a Markdown table; `at` says which run was stored. */
export function changeTable(rows, at) {
  const lines = rows.map((r) => {
    const pct = Number.isFinite(r.change) ? `${r.change >= 0 ? "+" : ""}${(r.change * 100).toFixed(0)} %` : "new";
    return `| ${r.name} | ${shown(r.before)} | ${shown(r.after)} | ${pct} | ${r.worse ? `**worse by more than ${WORSE_BY * 100} %**` : ""} |`;
  });
  const worse = rows.filter((r) => r.worse).length;
  return [
    `Change from the stored run (${at ?? "unknown"}): ${worse ? `${worse} figure${worse > 1 ? "s" : ""} more than ${WORSE_BY * 100} % worse` : `none more than ${WORSE_BY * 100} % worse`}`,
    "",
    "| figure | stored | now | change | |",
    "|---|---|---|---|---|",
    ...lines,
  ].join("\n");
}
