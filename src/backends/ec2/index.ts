// The ec2 driver as the dispatcher knows it (driver-module.ts): AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, EC2_REGION and EC2_API_URL, VM_TEMPLATE (or a named backend's own) as the
// RunInstances input's defaults, each pool's template, candidates (InstanceType, SubnetId), market
// and spotFallback over it, all checked against the EC2 service model at load; one instance per
// assignment (driver.ts); the orphan sweep on the cron tick.
import { loadDownload } from "../runner-download.ts";
import { templateVariableOf } from "../refused-field.ts";
import type { DriverModule } from "../driver-module.ts";
import { endpointOf } from "./client.ts";
import { createEc2Driver, offerOf, type Ec2Settings } from "./driver.ts";
import { launchingProblems } from "./offer.ts";
import { attemptsOf, CANDIDATE_KEYS, checkRunBody, checkTemplate, runBody } from "./run-body.ts";

const str = (v: unknown) => (typeof v === "string" && v.trim() ? v.trim() : undefined);
const asTemplate = (v: unknown) => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined);
const sampleWho = { label: "template-check", instance: "check", backend: "check" };
const SAMPLE_TOKEN = "gdr-template-check-0-0";

export const ec2Driver: DriverModule<Ec2Settings> = {
  needsForge: true,
  replacesOnInterrupt: true,
  settingsKey: "ec2",
  templateVariable: "VM_TEMPLATE",
  poolFields: ["candidates", "market", "spotFallback"],
  figures: true,
  load(env, _using, problems) {
    const accessKeyId = str(env.AWS_ACCESS_KEY_ID);
    const secretAccessKey = str(env.AWS_SECRET_ACCESS_KEY);
    const region = str(env.EC2_REGION);
    if (!accessKeyId || !secretAccessKey)
      problems.push(
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are required with the ec2 driver (secrets: wrangler secret put; see examples/ec2-iam-policy.json)",
      );
    if (!region) problems.push("EC2_REGION is required with the ec2 driver (e.g. eu-central-1)");
    else if (!/^[a-z]{2}(-[a-z]+)+-\d{1,2}$/.test(region))
      problems.push(`EC2_REGION must be a region name such as eu-central-1, not ${JSON.stringify(region)}`);
    const url = str(env.EC2_API_URL) ?? (region ? endpointOf(region) : "");
    if (url && !/^https?:\/\//.test(url)) problems.push("EC2_API_URL must be an http(s) URL");
    const download = loadDownload("EC2", str(env.EC2_RUNNER_URL), str(env.EC2_RUNNER_SHA256), problems);
    if (!accessKeyId || !secretAccessKey || !region) return undefined;
    return {
      url,
      region,
      accessKeyId,
      secretAccessKey,
      template: asTemplate(env.VM_TEMPLATE),
      download,
    };
  },
  checkBackend(settings, b, variable, problems) {
    const template = b.template ?? settings.template;
    const name = variable || "VM_TEMPLATE";
    if (template === undefined) {
      problems.push(
        `${name} is required with the ec2 driver (${b.backend} backend): at least its ImageId and InstanceType, e.g. {"ImageId":"ami-0123456789abcdef0","InstanceType":"m7i.large"}`,
      );
      return;
    }
    const found = checkTemplate(name, template);
    if (!found.length)
      found.push(...checkRunBody(runBody(sampleWho, "#!/bin/sh\n", [template], { market: "on-demand" }, SAMPLE_TOKEN)).map((p) => `${name}: ${p}`));
    problems.push(...found.map((p) => `${p} (${b.backend} backend)`));
  },
  checkPool(settings, b, pool, problems) {
    const named = ` (pool ${JSON.stringify(pool.name)})`;
    const before = problems.length;
    if (pool.spotFallback && pool.market !== "spot") problems.push(`${pool.at("spotFallback")} needs ${pool.at("market")} "spot"${named}`);
    for (const [i, candidate] of (pool.candidates ?? []).entries()) {
      if (Object.keys(candidate).sort().join() !== [...CANDIDATE_KEYS].sort().join())
        problems.push(`${pool.at("candidates")}[${i}] must have exactly ${CANDIDATE_KEYS.join(" and ")}${named}`);
    }
    if (pool.template) problems.push(...checkTemplate(pool.at("template"), pool.template).map((p) => `${p}${named}`));
    const template = b.template ?? settings.template;
    if (problems.length > before || template === undefined) return;
    // Every attempt the pool can make, as EC2 would take it.
    for (const attempt of attemptsOf({ ...pool, market: pool.market, spotFallback: pool.spotFallback })) {
      const body = runBody(sampleWho, "#!/bin/sh\n", [template, pool.template], attempt, SAMPLE_TOKEN);
      const i = attempt.candidate ? (pool.candidates ?? []).indexOf(attempt.candidate) : -1;
      const where = i >= 0 ? `${pool.at("candidates")}[${i}]` : pool.at("template");
      problems.push(...checkRunBody(body).map((p) => `${where} would make an invalid RunInstances request (${attempt.market}): ${p}${named}`));
    }
  },
  offerProblems: (settings, b, pools, offer) =>
    launchingProblems({ of: offerOf(settings), templateVariable: templateVariableOf(b), template: b.template ?? settings.template, pools }, offer),
  create: (b, settings, deps) =>
    createEc2Driver({ backend: b.backend, settings, template: b.template ?? settings.template, templateVariable: templateVariableOf(b), deps }),
};
