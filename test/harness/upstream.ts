// The upstream API descriptions as validators (Node only: ajv compiles code): Kubernetes' and
// KubeVirt's, strict as the API server's field validation, and the Gitea and Forgejo files.
import { readFileSync } from "node:fs";
import { Ajv, type ValidateFunction } from "ajv";

const dir = new URL("../fixtures/upstream-schemas/", import.meta.url);
const kubeDir = new URL("../../src/backends/kubernetes/upstream/", import.meta.url);
export const load = (file: string) => JSON.parse(readFileSync(new URL(file, file.startsWith("gitea") || file.startsWith("forgejo") ? dir : kubeDir), "utf8"));

/** Every object schema that lists its properties refuses others, as kubectl-validate's strict mode. */
function strict(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(strict);
  if (!node || typeof node !== "object") return node;
  const out = Object.fromEntries(
    Object.entries(node).map(([k, v]) => [k, k === "properties" ? Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, strict(s)])) : strict(v)]),
  );
  if ("properties" in out && !("additionalProperties" in out)) out.additionalProperties = false;
  return out;
}

export function validator(file: string, ref: string): ValidateFunction {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  ajv.addSchema(strict(load(file)) as object, file);
  const validate = ajv.getSchema(`${file}${ref}`);
  if (!validate) throw new Error(`${ref} is not in ${file}`);
  return validate;
}

export const pod = validator("k8s-core-v1.json", "#/components/schemas/io.k8s.api.core.v1.Pod");
export const secret = validator("k8s-core-v1.json", "#/components/schemas/io.k8s.api.core.v1.Secret");
export const vmi = validator("kubevirt-v1.json", "#/definitions/v1.VirtualMachineInstance");

export const errorsOf = (validate: ValidateFunction, value: unknown) =>
  validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
