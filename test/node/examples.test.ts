// The shipped Prometheus rules and Grafana dashboard: every query parses as PromQL (Prometheus's
// own grammar), and every gdr_ metric it names is one /metrics exports.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findNatsServer } from "../../scripts/nats-server.mjs";
import { parser } from "@prometheus-io/lezer-promql";
import { parse as parseYaml } from "yaml";
import { describe, expect, it } from "vitest";
import { everyMetric } from "../harness/metrics.ts";

const text = everyMetric();
// A histogram is queried by its series: <name>_bucket, _sum and _count.
const exported = new Set(
  [...text.matchAll(/^# TYPE (\S+) (\S+)/gm)].flatMap(([, name, type]) =>
    type === "histogram" ? ["_bucket", "_sum", "_count"].map((s) => name! + s) : [name!],
  ),
);

function checkQuery(expr: string): string[] {
  const problems: string[] = [];
  const tree = parser.parse(expr);
  tree.iterate({ enter: (node) => void (node.type.isError && problems.push(`syntax error at ${node.from} in: ${expr}`)) });
  for (const [name] of expr.matchAll(/\bgdr_[a-z_]+\b/g)) if (!exported.has(name)) problems.push(`${name} is not exported by /metrics`);
  return problems;
}

describe("examples", () => {
  it("the grammar check itself catches a broken query and an unknown metric", () => {
    expect(checkQuery("gdr_slots_in_use >= ")).not.toEqual([]);
    expect(checkQuery("gdr_slots_in_uses > 1")).toEqual(["gdr_slots_in_uses is not exported by /metrics"]);
    expect(checkQuery('sum by (backend) (gdr_assignments{state="claimed"})')).toEqual([]);
  });

  it("prometheus-rules.yaml: every alert's expression parses and names exported metrics; the three alerts asked for are there", () => {
    const doc = parseYaml(readFileSync("examples/prometheus-rules.yaml", "utf8")) as { groups: { rules: { alert: string; expr: string; for?: string }[] }[] };
    const rules = doc.groups.flatMap((g) => g.rules);
    expect(rules.flatMap((r) => checkQuery(r.expr))).toEqual([]);
    const byName = new Map(rules.map((r) => [r.alert, r]));
    expect(byName.get("GdrCapacityExhausted")).toMatchObject({ for: "10m" });
    expect(byName.get("GdrUnhealthy")?.expr).toContain("probe_success");
    expect(byName.get("GdrQueueNotDraining")?.expr).toContain("gdr_consumer_pending_messages");
    expect(byName.get("GdrSlowJobStart")?.expr).toContain("gdr_job_startup_duration_seconds_bucket");
    // The two the docs say to alert on.
    expect(byName.get("GdrPoolBootGiveUps")?.expr).toContain("gdr_pool_boot_give_ups_total");
    expect(byName.get("GdrForgejoPollFailing")?.expr).toContain("gdr_forgejo_poll_failing");
  });

  it("prometheus-rules.yaml: every rule has a runbook_url naming a section of docs/troubleshooting.md", () => {
    const doc = parseYaml(readFileSync("examples/prometheus-rules.yaml", "utf8")) as {
      groups: { rules: { alert: string; annotations: Record<string, string> }[] }[];
    };
    const headings = new Set(
      [...readFileSync("docs/troubleshooting.md", "utf8").matchAll(/^#+ (.+)$/gm)].map((m) =>
        m[1]!
          .trim()
          .toLowerCase()
          .replace(/[^\w\- ]/g, "")
          .replaceAll(" ", "-"),
      ),
    );
    const wrong = doc.groups
      .flatMap((g) => g.rules)
      .filter((r) => {
        const m = /\/docs\/troubleshooting\.md#(.+)$/.exec(r.annotations?.runbook_url ?? "");
        return !m || !headings.has(m[1]!);
      })
      .map((r) => r.alert);
    expect(wrong).toEqual([]);
    expect(headings.has("boot_gave_up")).toBe(true);
  });

  it("grafana-dashboard.json: importable JSON whose panels query exported metrics (queue, slots, states, redeliveries)", () => {
    const dash = JSON.parse(readFileSync("examples/grafana-dashboard.json", "utf8")) as {
      title: string;
      panels: { title: string; targets: { expr: string }[] }[];
    };
    const exprs = dash.panels.flatMap((p) => p.targets.map((t) => t.expr.replaceAll("$backend", ".*")));
    expect(exprs.flatMap(checkQuery)).toEqual([]);
    const used = exprs.join(" ");
    for (const name of [
      "gdr_consumer_pending_messages",
      "gdr_slots_in_use",
      "gdr_capacity",
      "gdr_assignments",
      "gdr_consumer_redelivered_messages",
      "gdr_job_startup_duration_seconds_bucket",
      "gdr_pool_runners",
    ])
      expect(used).toContain(name);
  });

  it("nats-server.conf is a configuration the real nats-server accepts, with JetStream and WebSocket over TLS", () => {
    const text = readFileSync("examples/nats-server.conf", "utf8");
    expect(text).toMatch(/^jetstream \{/m);
    expect(text).toMatch(/^websocket \{[^}]*port: 443[^}]*tls \{/ms);
    const dir = mkdtempSync(join(tmpdir(), "gdr-natsconf-"));
    try {
      // Its own certificate in place of the example's paths; everything else as shipped.
      execFileSync(
        "openssl",
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1", "-subj", "/CN=test"],
        { stdio: "ignore" },
      );
      const conf = text
        .replace("/etc/nats/tls/fullchain.pem", join(dir, "cert.pem"))
        .replace("/etc/nats/tls/privkey.pem", join(dir, "key.pem"))
        .replace("/var/lib/nats/jetstream", join(dir, "js"));
      writeFileSync(join(dir, "nats.conf"), conf);
      const out = execFileSync(findNatsServer(process.env), ["-c", join(dir, "nats.conf"), "-t"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      expect(out).toBe("");
      // The near miss: a typo in a block is refused by the same check.
      writeFileSync(join(dir, "bad.conf"), conf.replace("max_file_store:", "max_file_stor:"));
      expect(() => execFileSync(findNatsServer(process.env), ["-c", join(dir, "bad.conf"), "-t"], { stdio: "pipe" })).toThrow();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("ec2-iam-policy.json", () => {
  type Statement = { Sid: string; Effect: string; Action: string | string[]; Resource: string | string[]; Condition?: unknown };
  const policy = JSON.parse(readFileSync("examples/ec2-iam-policy.json", "utf8")) as { Statement: Statement[] };
  const list = (v: string | string[]) => (Array.isArray(v) ? v : [v]);
  const glob = (pattern: string) => new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replaceAll("*", ".*")}$`);
  /** The statements that allow `action` on `arn`, conditions aside. */
  const allowing = (action: string, arn: string) =>
    policy.Statement.filter((s) => s.Effect === "Allow" && list(s.Action).includes(action) && list(s.Resource).some((r) => glob(r).test(arn))).map(
      (s) => s.Sid,
    );

  it("allows a Spot RunInstances on every resource type it names, the Spot request among them (AWS's Service Authorization Reference)", () => {
    const touched = [
      "instance/i-1",
      "volume/vol-1",
      "subnet/subnet-1",
      "security-group/sg-1",
      "network-interface/eni-1",
      "key-pair/k",
      "spot-instances-request/sir-1",
    ];
    for (const r of touched) expect(allowing("ec2:RunInstances", `arn:aws:ec2:eu-central-1:123456789012:${r}`), r).not.toEqual([]);
    expect(allowing("ec2:RunInstances", "arn:aws:ec2:eu-central-1::image/ami-1")).not.toEqual([]);
    // Near misses: nothing else is allowed to run, and terminating stays limited by tag.
    expect(allowing("ec2:RunInstances", "arn:aws:ec2:eu-central-1:123456789012:dedicated-host/h-1")).toEqual([]);
    expect(policy.Statement.filter((s) => list(s.Action).includes("ec2:TerminateInstances")).map((s) => s.Condition)).toEqual([
      { StringEquals: { "aws:ResourceTag/managed-by": "gitea-edge-dispatcher" } },
    ]);
    expect(policy.Statement.flatMap((s) => list(s.Action)).filter((a) => a.startsWith("iam:"))).toEqual([]);
  });
});
