// The hetzner driver as the dispatcher knows it (driver-module.ts): HCLOUD_TOKEN and
// HCLOUD_API_URL, VM_TEMPLATE (or a named backend's own) as the create body's defaults, each
// pool's template and candidates over it, all checked against Hetzner's API description at load;
// one server per assignment (driver.ts); the orphan sweep on the cron tick (sweep.ts).
import { loadDownload } from "../runner-download.ts";
import { templateVariableOf } from "../refused-field.ts";
import type { DriverModule } from "../driver-module.ts";
import { createHetznerDriver, type HetznerSettings } from "./driver.ts";
import { placingProblems } from "./offer.ts";
import { CANDIDATE_KEYS, checkCreateBody, checkTemplate, createBody } from "./server-body.ts";

export const DEFAULT_HCLOUD_API_URL = "https://api.hetzner.cloud/v1";

const str = (v: unknown) => (typeof v === "string" && v.trim() ? v.trim() : undefined);
const asTemplate = (v: unknown) => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined);
const sampleWho = { name: "gdr-template-check", label: "template-check", instance: "check", backend: "check" };

export const hetznerDriver: DriverModule<HetznerSettings> = {
  needsForge: true,
  settingsKey: "hetzner",
  templateVariable: "VM_TEMPLATE",
  poolFields: ["candidates", "reuse"],
  figures: true,
  load(env, _using, problems) {
    const token = str(env.HCLOUD_TOKEN);
    const url = (str(env.HCLOUD_API_URL) ?? DEFAULT_HCLOUD_API_URL).replace(/\/+$/, "");
    if (!token)
      problems.push("HCLOUD_TOKEN is required with the hetzner driver (a secret: wrangler secret put; a read & write API token of the servers' project)");
    if (!/^https?:\/\//.test(url)) problems.push("HCLOUD_API_URL must be an http(s) URL");
    const download = loadDownload("HCLOUD", str(env.HCLOUD_RUNNER_URL), str(env.HCLOUD_RUNNER_SHA256), problems);
    if (!token) return undefined;
    return { url, token, template: asTemplate(env.VM_TEMPLATE), download };
  },
  checkBackend(settings, b, variable, problems) {
    const template = b.template ?? settings.template;
    const name = variable || "VM_TEMPLATE";
    if (template === undefined) {
      problems.push(
        `${name} is required with the hetzner driver (${b.backend} backend): at least its image and server_type, e.g. {"image":"ubuntu-24.04","server_type":"cx22","location":"fsn1"}`,
      );
      return;
    }
    const found = checkTemplate(name, template);
    if (!found.length) found.push(...checkCreateBody(createBody(sampleWho, "#!/bin/sh\n", [template])).map((p) => `${name}: ${p}`));
    problems.push(...found.map((p) => `${p} (${b.backend} backend)`));
  },
  checkPool(settings, b, pool, problems) {
    // A pool that changes nothing, or a backend without its template (said already), adds no problem of its own.
    if ((!pool.template && !pool.candidates) || (b.template ?? settings.template) === undefined) return;
    const named = ` (pool ${JSON.stringify(pool.name)})`;
    const before = problems.length;
    if (pool.template) {
      const found = checkTemplate(pool.at("template"), pool.template);
      problems.push(...found.map((p) => `${p}${named}`));
      if (found.length) return;
    }
    for (const [i, candidate] of (pool.candidates ?? []).entries()) {
      const keys = Object.keys(candidate).sort().join();
      if (keys !== [...CANDIDATE_KEYS].sort().join()) problems.push(`${pool.at("candidates")}[${i}] must have exactly ${CANDIDATE_KEYS.join(" and ")}${named}`);
    }
    if (problems.length > before) return;
    for (const [i, candidate] of (pool.candidates ?? [undefined]).entries()) {
      const body = createBody(sampleWho, "#!/bin/sh\n", [b.template ?? settings.template, pool.template], candidate);
      const where = candidate ? `${pool.at("candidates")}[${i}]` : pool.at("template");
      problems.push(...checkCreateBody(body).map((p) => `${where} would make an invalid create-server body: ${p}${named}`));
    }
  },
  offerProblems: (settings, b, pools, offer) =>
    placingProblems({ url: settings.url, templateVariable: templateVariableOf(b), template: b.template ?? settings.template, pools }, offer),
  create: (b, settings, deps) =>
    createHetznerDriver({ backend: b.backend, settings, template: b.template ?? settings.template, templateVariable: templateVariableOf(b), deps }),
};
